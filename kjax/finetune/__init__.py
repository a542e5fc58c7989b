"""Fine-tuning a pretrained kjax encoder on KLUE-style tasks (`kjax finetune`)."""
