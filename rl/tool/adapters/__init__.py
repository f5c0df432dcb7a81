"""A trained Q-RAG retriever inside RAG frameworks (docs/RETRIEVER_TOOL.md, "LangChain and LlamaIndex"):
``rl.tool.adapters.langchain`` (extra ``langchain``) and ``rl.tool.adapters.llamaindex`` (extra
``llamaindex``), both over ``rl.tool.adapters.bound``, which needs neither framework."""
