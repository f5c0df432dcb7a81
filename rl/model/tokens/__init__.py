"""Tokenisation in one place (DESIGN §2.6): how a state is framed (layout.py), chunk and question
ids tokenised once per sample (tokenize.py), flat id storage (ragged.py), the states and actions
spliced from those ids (splice.py), and how a sample is shown to the encoders (sample_input.py: the
Q-network holds one, and its ids per episode, kept while the episode lives, per_sample.py). The
speed layer (rl/model/fast/) and the network (rl/model/qnetwork.py) import from here, never back."""
