"""Shared fixtures. Tests run on an 8-device CPU mesh: the device count must
be fixed before JAX is imported, hence the environment set at the top."""
import os

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache for the whole run, its workers and every
# `kjax` they start: most tests compile the same tiny model, and XLA's CPU
# compile was the larger part of a subprocess test's time. Made by the first
# process (pytest's, or xdist's controller, whose environment the workers
# inherit) and removed by it at the end (pytest_unconfigure). A test that
# needs its own cache sets its own.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="kjax-tests-jax-cache-")
    os.environ["KJAX_TESTS_OWN_JAX_CACHE"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
# Every executable goes in, not only those that took a second to compile
# (jax's default): a `kjax` subprocess or the other worker compiling the same
# small program then reads it back.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# XLA's CPU backend compiles the tests' programs without LLVM's optimisations:
# the programs are tiny, so compiling them, not running them, is what takes the
# time (test_train.py and a train-step test of every attention path, cold
# cache: 233 s at XLA's default level 3, 173 s at 0). Users' runs (the
# demo, the wheel check) keep XLA's default. Set here, every `kjax` the tests
# start inherits it; an XLA_FLAGS that already names a level keeps its own.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(filter(None, (
        os.environ.get("XLA_FLAGS"), "--xla_backend_optimization_level=0")))

import sys  # noqa: E402

# The repository's own tooling (compile_checks/: the compile record, HLO and
# ptxas checks, the figure writer) is not in the installed package: the tests
# import it from the checkout.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gcs  # noqa: E402

# gs:// everywhere in the tests means the local emulator (tests/gcs.py), for
# this process and its subprocesses; set before any GCS client is imported.
gcs.configure_environment()

import pytest  # noqa: E402

from kjax.config import load_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_CONFIG = os.path.join(ROOT, "tpu_configs", "demo.py")


def tiny_overrides(tmp: str, **extra) -> list[str]:
    """A model small enough to compile in seconds, on the demo corpus."""
    values = {
        "model.vocab_size": 600, "tokenizer.vocab_size": 600,
        "model.hidden_size": 32, "model.num_layers": 2, "model.num_heads": 4,
        "model.intermediate_size": 64, "model.max_position_embeddings": 64,
        "model.dtype": "float32",
        "tokenizer.path": f"{tmp}/tok/sp", "data.dir": f"{tmp}/examples",
        # the small fixture corpus (KoNLPy's 0.13 MB), not the demo's vocabulary text
        "tokenizer.corpus": "", "data.corpus": "konlpy",
        "tokenizer.character_coverage": 0.9995, "tokenizer.input_sentence_size": 2_000_000,
        "data.max_seq_len": 64, "data.max_predictions_per_seq": 10,
        "train.batch_size": 16, "train.num_steps": 6, "train.warmup_steps": 2,
        "train.log_every": 1, "train.eval_every": 0, "train.checkpoint_every": 3,
        "train.eval_batches": 2,
        # The recipe the tests were written against (BERT's: MLM + NSP, whole-eojeol
        # masking at 15 %, dropout, a unigram vocabulary), whatever the demo's is.
        "model.dropout_rate": 0.1, "model.attention_dropout_rate": 0.1,
        "tokenizer.model_type": "unigram", "data.masked_lm_prob": 0.15,
        "data.mask_unit": "eojeol", "data.nsp_prob": 0.5, "train.nsp_weight": 1.0,
        "train.learning_rate": 1e-3,
    }
    values.update(extra)
    return [f"--config.{k}={v}" for k, v in values.items()]


def tiny_config(tmp, **extra):
    """The tiny run's config, its auto keys resolved for this platform as a verb
    resolves the config it loads (models are built from resolved configs only)."""
    from kjax.config import platform_defaults
    from kjax.model.arch import architecture
    config = load_config(DEMO_CONFIG, tiny_overrides(str(tmp), **extra))
    platform_defaults.resolve(config, keys=architecture(config).auto_keys)
    return config


@pytest.fixture(scope="session")
def prepared(tmp_path_factory):
    """Tokenizer + examples on the demo corpus, built once for the whole run
    (both xdist workers read the same folder: tests read it, never change it)."""
    def build(folder):
        from kjax.pretrain.prepare import prepare
        from kjax.tokens.factory import train_tokenizer
        config = tiny_config(folder)
        train_tokenizer(config)
        prepare(config, progress=False)
    return built_once(tmp_path_factory, "prepared", build)


def built_once(tmp_path_factory, name: str, build) -> "os.PathLike":
    """The folder `name`, built by `build(folder)` once for the whole run:
    under xdist the first worker to ask builds it and the other waits on a
    file lock, then reads it (it must not change it)."""
    import fcntl
    import shutil
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent   # this run's workers share it; other runs have their own
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the builder's file closes
        if not (folder / ".built").exists():   # first, or the builder failed
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


@pytest.fixture(scope="session")
def analyzer():
    """One Kiwi analyzer for the run's morpheme tests (loading its model takes seconds)."""
    from kjax.morph import KoreanAnalyzer
    return KoreanAnalyzer()


@pytest.fixture(scope="session")
def trained_run(prepared, tmp_path_factory):
    """The workdir of tiny_config(prepared)'s finished run (6 steps, saved at
    3 and 6), trained once for the whole run. Read it, or copy it
    (shutil.copytree) to change it: tests on both workers share it."""
    def build(folder):
        from kjax.pretrain.trainer import train
        train(tiny_config(prepared), str(folder / "run"), progress=False)
    return str(built_once(tmp_path_factory, "trained", build) / "run")


@pytest.fixture(scope="session")
def gcs_server():
    """fake-gcs-server for this test process (started on first use)."""
    server = gcs.Emulator(os.environ["KJAX_TEST_GCS_URL"])
    yield server
    server.stop()


@pytest.fixture
def gs_root(gcs_server, request):
    """A fresh gs:// folder for one test, in the emulator's bucket."""
    import uuid
    import re
    name = re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)[:40]
    return f"gs://{gcs.BUCKET}/{name}-{uuid.uuid4().hex[:8]}"


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end runs of a minute or more (kept in CI)")


def pytest_collection_modifyitems(config, items):
    """Files with the most slow tests first, each file's tests kept together
    and in order. `make test` hands tests out one at a time (xdist's
    --maxschedchunk 1), so the long runs start early and the two workers end
    together on short tests instead of one waiting for the other's last
    long run."""
    slow: dict[str, int] = {}
    for item in items:
        slow[item.fspath] = slow.get(item.fspath, 0) + (item.get_closest_marker("slow") is not None)
    first = {path: i for i, path in enumerate(slow)}
    items.sort(key=lambda item: (-slow[item.fspath], first[item.fspath]))


def pytest_unconfigure(config):
    """Removes the run's compilation cache (see the top), in the process that made it."""
    made = os.environ.get("KJAX_TESTS_OWN_JAX_CACHE")
    if made and made == os.environ.get("JAX_COMPILATION_CACHE_DIR") and \
            not hasattr(config, "workerinput"):
        import shutil
        shutil.rmtree(made, ignore_errors=True)
