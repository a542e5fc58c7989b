"""The pretraining verbs' library code, above every stage they drive:
`kjax prepare` (prepare.py, and as an Apache Beam pipeline, beam_prepare.py)
and the train/eval loop (trainer.py). The command line (kjax/cli) calls
these; they are importable on their own."""
