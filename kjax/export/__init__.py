"""The bridge between kjax (JAX/Flax) and PyTorch transformers 5, which has
no Flax classes and no Flax↔PyTorch converter of its own:

    hf_export         kjax params ⇄ BertForPreTraining weights: the common writer
    electra_export    models with an embedding projection as ELECTRA (uses hf_export)
    model_card        the exported README.md
    checkpoint_export `kjax export`: picks the writer, adds tokenizer and card (the top)
    hf_import         transformers BERT / RoBERTa / ELECTRA folder → kjax checkpoint
    torch_shake       Eq. 1 (SHAKE) as transformers attention "kjax_shake"
    torch_multihot    Eq. 3–4 multi-hot input generator as transformers models (remote code)
    multihot_export   what the export of multi-hot (UKnowBERT) models adds
    tokenizer_export  kjax tokenizers as transformers tokenizers
    cli               the `kjax export` and `kjax import` verbs

Needs the `[torch]` extra (torch, transformers); see docs/EXPORT.md.
"""
