"""`kjax knowledge stats` against hand counts, `kjax inspect`'s shaking and
knowledge sections, and the UKnowBERT demo's settings."""
import json

import pytest

from conftest import DEMO_CONFIG
from kjax.cli import demo_overrides, main
from kjax.config import load_config
from pipeline_helpers import scheme_config, write_corpus

# One document: 4 nouns (나 학교 차 칫솔), 3 with hypernyms and sense vectors in the
# shipped samples (나/NP has none), 2 predicates (마시, 사) whose frames (을,를) each
# find their object: 마시 → 차, 사 → 칫솔 by the frame rule (METHODS §2.5).
DOC = "나는 학교에서 차를 마셨다.\n칫솔을 샀다.\n"


def test_knowledge_stats_match_hand_counts(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text(DOC, encoding="utf-8")
    assert main(["knowledge", "stats", "--config", DEMO_CONFIG, "--json",
                 f"--config.data.corpus={corpus}", "--config.data.document_per_file=False",
                 f"--config.tokenizer.path={tmp_path}/none/sp",
                 "--config.tokenizer.scheme=multihot", "--config.model.input_mode=multihot",
                 "--config.data.mask_unit=morpheme", "--config.train.mlm_loss=eq9"]) == 0
    out = json.loads(capsys.readouterr().out)
    c = out["coverage"]
    assert (c["sequences"], c["nouns"], c["predicates"]) == (1, 4, 2)
    assert c["noun_hypernym_share"] == c["noun_sense_share"] == 0.75
    assert c["predicate_frame_share"] == 1.0 and c["verb_frame_share"] == 1.0
    assert c["mean_sense_per_sequence"] == 3 and c["mean_verb_per_sequence"] == 2
    # No trained vocabulary: what the hypernym head could predict is unknown, not 0.
    assert out["vocabulary"] is None and c["noun_token_hypernym_share"] is None
    assert out["resources"]["sense_dim"] == 16


def test_knowledge_stats_names_a_bad_resource_line(tmp_path, capsys):
    bad = tmp_path / "hyp.tsv"
    bad.write_text("칫솔/NNG\t솔\n학교/XYZ\t기관\n", encoding="utf-8")
    corpus = tmp_path / "c.txt"
    corpus.write_text(DOC, encoding="utf-8")
    assert main(["knowledge", "stats", "--config", DEMO_CONFIG, f"--config.data.corpus={corpus}",
                 f"--config.knowledge.hypernyms={bad}"]) == 2
    assert f"{bad}:2" in capsys.readouterr().err


@pytest.fixture(scope="module")
def multihot(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mh")
    return scheme_config(tmp, "multihot", write_corpus(tmp / "c.txt"))


def overrides(config):
    return [f"--config.tokenizer.scheme={config.tokenizer.scheme}",
            f"--config.tokenizer.path={config.tokenizer.path}",
            "--config.model.input_mode=multihot", "--config.data.mask_unit=morpheme",
            "--config.train.mlm_loss=eq9"]


def test_inspect_shows_shaking_pairs_over_morphemes(multihot, capsys):
    assert main(["inspect", "나는 너를 학교에서 보았다", "--config", DEMO_CONFIG, "--json",
                 *overrides(multihot), "--config.shake.boost_prem=1.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    pairs = [(p["query"], p["key"], p["weight"]) for p in out["shaking"]]
    # Positions are morphemes ([CLS] = 0); group 1 gets boost_prem, JKB (group 2) 1.
    assert pairs == [("는@2", "나@1", 1.5), ("를@4", "너@3", 1.5), ("에서@6", "학교@5", 1.0)]
    assert "variant 'pos' would use" in out["shaking_note"]


def test_inspect_shows_knowledge_targets(multihot, capsys):
    assert main(["inspect", "나는 학교에서 차를 마셨다", "--config", DEMO_CONFIG, "--json",
                 *overrides(multihot)]) == 0
    rows = {r["#"]: r for r in json.loads(capsys.readouterr().out)["knowledge"]}
    # Forms are what the loader sees: the tokens' surfaces (this tiny vocabulary
    # has no 마시, so it reads [UNK]); the predicate still points at its object.
    assert rows[7]["tag"] == "VV" and rows[7]["verb →"] == "차@5"
    assert (rows[3]["form"], rows[3]["sense"]) == ("학교", "yes")
    assert (rows[5]["form"], rows[5]["sense"]) == ("차", "yes")
    assert 1 not in rows                               # 나/NP: no resource entry, no target


def test_token_schemes_have_no_knowledge_section():
    from kjax.cli.inspect import SECTIONS
    from kjax.cli.inspect import knowledge_section
    assert knowledge_section in SECTIONS
    assert knowledge_section("", None, type("T", (), {"scheme": "morph-sp"})(), {}) is None


def test_uknowbert_demo_turns_on_all_five_objectives(tmp_path):
    config = load_config(DEMO_CONFIG, demo_overrides(None, uknowbert=True))
    assert config.model.input_mode == "multihot" and config.train.mlm_loss == "eq9"
    assert config.train.nsp_weight > 0
    g = config.knowledge
    assert g.hypernym_weight == g.sense_weight == g.verb_weight == 1.0
    assert config.data.dir != load_config(DEMO_CONFIG, []).data.dir  # no clobbering
    with pytest.raises(Exception, match="multihot"):
        demo_overrides("morph-sp", uknowbert=True)
