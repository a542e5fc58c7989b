"""kjax: pretraining Korean BERT-family encoders with JAX/Flax."""
__version__ = "0.1.0"
