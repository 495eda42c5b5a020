"""Pretraining and training examples built in the graph from corpora: sentence pairs,
masking, permutation targets, causal LM, seq2seq and word2vec examples, packing."""
