"""Tokenisation in one place (DESIGN §2.6): how a state is framed (layout.py), chunk and question
ids tokenised once per sample (tokenize.py), flat id storage (ragged.py) and the states and actions
spliced from those ids (splice.py). The speed layer (rl/model/fast/) imports from here, never back."""
