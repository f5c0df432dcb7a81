"""A trained Q-RAG retriever inside RAG frameworks (docs/RETRIEVER_TOOL.md, "LangChain and LlamaIndex"):
``rl.run.adapters.langchain`` (extra ``langchain``) and ``rl.run.adapters.llamaindex`` (extra
``llamaindex``), both over ``rl.run.adapters.bound``, which needs neither framework."""
