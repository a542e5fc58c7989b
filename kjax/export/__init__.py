"""The bridge between kjax (JAX/Flax) and PyTorch transformers 5, which has
no Flax classes and no Flax↔PyTorch converter of its own. Every module, the
top first (each imports only modules listed below it):

    formats                 each export format's writer and reader: what `kjax export`
                            and `kjax import` call (an architecture names its format)
    checkpoint_export       format `bert`: a BERT-recipe run → a transformers folder; picks
                            the writer, adds tokenizer and model card
    modernbert_export       format `modernbert`: the modern recipe ⇄ ModernBertForMaskedLM
    electra_pair_import     format `electra_pair`, back: a discriminator + generator pair
                            → one ELECTRA run (uses hf_import)
    electra_pair_export     format `electra_pair`: an ELECTRA run → OUT/discriminator and
                            OUT/generator
    hf_import               a transformers BERT / RoBERTa / ELECTRA-discriminator / kjax
                            multi-hot folder → kjax checkpoint + config
    model_card              the exported README.md
    narrow_embedding_export BERT-recipe models whose embeddings are narrower than the
                            encoder (model.embedding_size < hidden) ⇄ transformers ELECTRA
                            classes (BERT has no embedding projection; uses hf_export)
    hf_export               kjax params ⇄ BertForPreTraining weights: the common table
    multihot_export         what the export of multi-hot (UKnowBERT) models adds
    tokenizer_export        kjax tokenizers as transformers tokenizers
    torch_multihot          Eq. 3–4 multi-hot input generator as transformers models
                            (remote code, copied into the folder)
    torch_shake             Eq. 1 (SHAKE) as transformers attention "kjax_shake"

The verbs themselves are kjax/cli/export.py. Needs the `[torch]` extra
(torch, transformers); see docs/EXPORT.md.
"""
