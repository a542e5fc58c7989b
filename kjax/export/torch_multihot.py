"""UKnowBERT's multi-hot input generator (METHODS §2.3, Eq. 3–4) on top of the
transformers BERT encoder, in PyTorch — the same computation as kjax's
`Embeddings.morpheme_vectors` (kjax/model/encoder.py).

One model position per morpheme k, whose tokens t_0 … t_j come as a flat
token stream with, per token, its position and its place in the morpheme:

    T_k     = Σ_i E_tok[t_i] ⊙ E_inpos[i]                        (Eq. 3)
    Input_k = T_k + E_pos[k] + E_postag[tag_k] + E_type[type_k]   (Eq. 4)

Inputs (kjax's multi-hot batch, kjax/inputs/segments.py):
    input_ids       [b, t]  the flat token stream (kjax: token_ids)
    token_position  [b, t]  the position (morpheme) each token belongs to; -1 = filler
    token_inpos     [b, t]  the token's index inside its morpheme
    position_tags   [b, s]  POS tag id per position
    token_type_ids, attention_mask, position_ids  [b, s]  per position, as in BERT

`kjax export` copies this file into the model folder as
modeling_kjax_multihot.py and points config.json's auto_map at it, so

    AutoModel.from_pretrained(folder, trust_remote_code=True)
    AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True)
    AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)
    AutoModelForSequenceClassification.from_pretrained(folder, num_labels=N,
                                                       trust_remote_code=True)

load it (AutoModelForPreTraining needs a run that trained NSP, whose export
is KjaxMultihotForPreTraining; an MLM-only run's is KjaxMultihotForMaskedLM,
with no pooler, so AutoModel and the classifier start a new one; the
classification head is new, for fine-tuning). It imports only torch and
transformers (remote code must not need kjax). Shaking works as for BERT: `import kjax.export.torch_shake`, load with
attn_implementation="kjax_shake", pass `shake_matrix=B` [b, s, s] over positions.
"""
from __future__ import annotations

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import BertConfig
from transformers import initialization as init
from transformers.modeling_outputs import MaskedLMOutput
from transformers.models.bert.modeling_bert import (BertEmbeddings, BertEncoder,
                                                    BertForMaskedLM, BertForPreTraining,
                                                    BertForPreTrainingOutput,
                                                    BertForQuestionAnswering,
                                                    BertForSequenceClassification, BertModel,
                                                    BertOnlyMLMHead, BertPooler,
                                                    BertPreTrainedModel, BertPreTrainingHeads)

MULTIHOT_KEYS = ("token_position", "token_inpos", "position_tags")


@strict
class KjaxMultihotConfig(BertConfig):
    model_type = "kjax_multihot"
    num_pos_tags: int = 64              # E_postag rows
    max_tokens_per_morpheme: int = 16   # E_inpos rows; deeper tokens share the last one


class KjaxMultihotEmbeddings(BertEmbeddings):
    """BertEmbeddings plus E_inpos and E_postag; Eq. 3 is `morpheme_vectors`,
    and BertEmbeddings.forward adds E_type and E_pos and normalises (Eq. 4)."""

    def __init__(self, config):
        super().__init__(config)
        self.inpos_embeddings = nn.Embedding(config.max_tokens_per_morpheme, config.hidden_size)
        self.postag_embeddings = nn.Embedding(config.num_pos_tags, config.hidden_size)

    def morpheme_vectors(self, token_ids, token_position, token_inpos, num_positions):
        """T [b, s, H]: a segment sum per example over the flat token stream."""
        inpos = token_inpos.clamp(0, self.inpos_embeddings.num_embeddings - 1)
        vectors = self.word_embeddings(token_ids) * self.inpos_embeddings(inpos)
        # Filler tokens (-1) and out-of-range positions are dropped, as
        # jax.ops.segment_sum drops them in kjax.
        keep = (token_position >= 0) & (token_position < num_positions)
        vectors = vectors * keep[..., None].to(vectors.dtype)
        index = torch.where(keep, token_position, 0)[..., None].expand_as(vectors)
        out = vectors.new_zeros(vectors.shape[0], num_positions, vectors.shape[-1])
        return out.scatter_add(1, index, vectors)


def _multihot_inputs(kwargs: dict, input_ids, inputs_embeds):
    missing = [k for k in MULTIHOT_KEYS if kwargs.get(k) is None]
    if inputs_embeds is None and (input_ids is None or missing):
        raise ValueError(f"a kjax multi-hot model needs input_ids (the flat token stream) and "
                         f"{', '.join(MULTIHOT_KEYS)}; missing: {missing or ['input_ids']}. "
                         f"KjaxMultihotTokenizer.multihot_inputs(texts) builds them")
    return [kwargs.pop(k, None) for k in MULTIHOT_KEYS]


class KjaxMultihotModel(BertModel):
    """BertModel whose positions are morphemes (Eq. 3–4 input generator)."""
    config_class = KjaxMultihotConfig

    def __init__(self, config, add_pooling_layer=True):
        BertPreTrainedModel.__init__(self, config)   # BertModel's body, other embeddings
        self.config = config
        self.gradient_checkpointing = False
        self.embeddings = KjaxMultihotEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, KjaxMultihotEmbeddings):
            # E_inpos multiplies E_tok (Eq. 3): near 1, as kjax initialises it.
            init.normal_(module.inpos_embeddings.weight, 1.0, self.config.initializer_range)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None,
                position_ids=None, inputs_embeds=None, **kwargs):
        """`inputs_embeds` [b, s, H], if given, replaces T_k + E_postag."""
        token_position, token_inpos, position_tags = _multihot_inputs(kwargs, input_ids,
                                                                      inputs_embeds)
        if inputs_embeds is None:
            emb = self.embeddings
            inputs_embeds = emb.morpheme_vectors(input_ids, token_position, token_inpos,
                                                 position_tags.shape[1])
            inputs_embeds = inputs_embeds + emb.postag_embeddings(position_tags)
        return super().forward(input_ids=None, attention_mask=attention_mask,
                               token_type_ids=token_type_ids, position_ids=position_ids,
                               inputs_embeds=inputs_embeds, **kwargs)


class KjaxMultihotForPreTraining(BertForPreTraining):
    """The multi-hot encoder with BERT's MLM (decoder tied to E_tok) and NSP heads.
    The MLM logits are per position (morpheme); kjax trains them with the
    multi-target loss of Eq. 7–9, which is not computed here (no `labels`)."""
    config_class = KjaxMultihotConfig

    def __init__(self, config):
        BertPreTrainedModel.__init__(self, config)
        self.bert = KjaxMultihotModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None,
                position_ids=None, inputs_embeds=None, labels=None, next_sentence_label=None,
                **kwargs):
        if labels is not None or next_sentence_label is not None:
            raise ValueError("the multi-hot MLM loss (METHODS Eq. 7–9) is not implemented in "
                             "PyTorch; compute it from prediction_logits, or pretrain with kjax")
        outputs = self.bert(input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids, position_ids=position_ids,
                            inputs_embeds=inputs_embeds, return_dict=True, **kwargs)
        prediction, relationship = self.cls(outputs.last_hidden_state, outputs.pooler_output)
        return BertForPreTrainingOutput(prediction_logits=prediction,
                                        seq_relationship_logits=relationship,
                                        hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions)


class KjaxMultihotForMaskedLM(BertForMaskedLM):
    """The multi-hot encoder with BERT's MLM head (decoder tied to E_tok): logits
    per position (morpheme) over the token vocabulary; no pooler. Loads the MLM
    head (cls.predictions.*) of any export but --encoder-only. kjax trains
    it with the multi-target loss of Eq. 7–9, not computed here (no `labels`)."""
    config_class = KjaxMultihotConfig

    def __init__(self, config):
        BertPreTrainedModel.__init__(self, config)
        self.bert = KjaxMultihotModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None,
                position_ids=None, inputs_embeds=None, labels=None, **kwargs):
        if labels is not None:
            raise ValueError("the multi-hot MLM loss (METHODS Eq. 7–9) is not implemented in "
                             "PyTorch; compute it from logits, or pretrain with kjax")
        outputs = self.bert(input_ids, attention_mask=attention_mask,
                            token_type_ids=token_type_ids, position_ids=position_ids,
                            inputs_embeds=inputs_embeds, return_dict=True, **kwargs)
        return MaskedLMOutput(logits=self.cls(outputs.last_hidden_state),
                              hidden_states=outputs.hidden_states,
                              attentions=outputs.attentions)


class KjaxMultihotForSequenceClassification(BertForSequenceClassification):
    """The multi-hot encoder with BERT's classification head on the pooled
    [CLS] (new weights: fine-tune it); transformers' loss from `labels`."""
    config_class = KjaxMultihotConfig

    def __init__(self, config):
        BertPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.config = config
        self.bert = KjaxMultihotModel(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None \
            else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class KjaxMultihotForQuestionAnswering(BertForQuestionAnswering):
    """The multi-hot encoder with BERT's span head: start/end logits per
    position (morpheme), a new head to fine-tune. `start_positions` /
    `end_positions` are morpheme positions (kjax fine-tuning maps an answer's
    characters to them: kjax/finetune/features.py apply_input_mode)."""
    config_class = KjaxMultihotConfig

    def __init__(self, config):
        BertPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.bert = KjaxMultihotModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


AUTO_MAP = {"AutoConfig": "KjaxMultihotConfig", "AutoModel": "KjaxMultihotModel",
            "AutoModelForPreTraining": "KjaxMultihotForPreTraining",
            "AutoModelForMaskedLM": "KjaxMultihotForMaskedLM",
            "AutoModelForSequenceClassification": "KjaxMultihotForSequenceClassification",
            "AutoModelForQuestionAnswering": "KjaxMultihotForQuestionAnswering"}
