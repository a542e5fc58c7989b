"""Fine-tuning tasks: one object each (kjax/finetune/task.py says what it
owns); this registry is the only place that lists them. Adding a task is one
class and one `register` call (docs/ARCHITECTURE.md has a worked example).

    classify  pair  wic  regress  choice     kjax/finetune/sentence_tasks.py
    ner  qa                                  kjax/finetune/span_tasks.py
"""
from __future__ import annotations

from kjax.errors import KjaxError
from kjax.finetune import sentence_tasks as sentence
from kjax.finetune import span_tasks as span
from kjax.finetune.task import Task

TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Adds `task` under its name (`kjax finetune --task NAME`)."""
    if not task.name or task.name in TASKS:
        raise ValueError(f"task name {task.name!r} is empty or taken ({', '.join(TASKS)})")
    TASKS[task.name] = task
    return task


for _task in (sentence.Classify(), sentence.Pair(), sentence.Regress(), span.NamedEntities(),
              span.QuestionAnswering(), sentence.Choice(), sentence.WordInContext()):
    register(_task)


def finetune_task(task) -> Task:
    """The task a name selects (a Task passes through)."""
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise KjaxError(f"--task {task!r}; choose one of {', '.join(TASKS)}")
    return TASKS[task]
