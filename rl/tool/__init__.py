"""The retriever as a product (docs/RETRIEVER_TOOL.md): a trained run retrieving from any text
(``retriever.py``), from a corpus index on disk (``corpus_index.py`` over ``corpus_files.py``,
``shard_store.py`` and ``corpus_search.py``), inside LangChain and LlamaIndex (``adapters/``), and
the export of its encoders (``export.py``); ``tool_inputs.py`` checks retrieve.py's own keys. It
loads a run through rl/run/load_run.py, never through the evaluation driver."""
