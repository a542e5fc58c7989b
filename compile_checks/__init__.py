"""What `make tpu-check` and `make gpu-check` (.ci/) hold a compiled step to,
and the benchmarks and tests that read the same programs:

- record.py: verdicts keyed by the lowered program (.ci/compile_record.json);
- targets.py: the deviceless H100 the GPU programs compile for;
- hlo.py: checks on a compiled step's optimized HLO text (scatters, traffic);
- ptx.py: ptxas' report on the Pallas kernels (registers, spills, wgmma);
- cases.py: what each check compiles;
- figures.py: the record's memory figures, written into the presets' headers
  and the tables of docs/TPU.md and docs/GPU.md
  (`python -m compile_checks.figures`).

Repository tooling, not part of the installed kjax package (the wheel has
none of it): .ci/, benchmarks/ and the tests import it from the checkout.
`kjax compile`, the user's verb, is kjax/pretrain/aot.py and memory_fit.py, which
these checks call."""
