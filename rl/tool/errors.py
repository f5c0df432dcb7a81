"""The tool's own error, apart from the modules that raise it: the retriever, its export and the
checks of retrieve.py's keys import each other's functions, never this class from each other."""


class RetrieverError(ValueError):
    """Bad input to the tool (missing run folder, empty text, over-long question, ...): one line."""
