"""Lexical knowledge for UKnowBERT's pretraining heads (METHODS §2.5): open
file formats (resources), verb-relation targets, per-sequence target arrays."""
from kjax.knowledge.resources import (DATA_DIR, KnowledgeBase, LemmaKey, ResourceError,
                                      load_case_frames, load_hypernyms, load_sense_vectors,
                                      parse_lemma)
from kjax.knowledge.targets import (KnowledgeCoverage, coverage_stats, hypernym_targets,
                                    knowledge_targets, sense_targets, verb_targets)
from kjax.knowledge.verb_relation import (VerbRelation, find_verb_relations,
                                          verb_relation_targets)

__all__ = [
    "DATA_DIR", "KnowledgeBase", "LemmaKey", "ResourceError", "load_case_frames",
    "load_hypernyms", "load_sense_vectors", "parse_lemma", "KnowledgeCoverage",
    "coverage_stats", "hypernym_targets", "knowledge_targets", "sense_targets",
    "verb_targets", "VerbRelation", "find_verb_relations", "verb_relation_targets",
]
