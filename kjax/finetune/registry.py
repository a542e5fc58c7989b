"""The fine-tuning tasks, by name: the only list of them. Each task is one
object (kjax/finetune/contract.py says what it owns) in its family's module;
this module imports the families, and nothing below it imports the registry.
Adding a task is its own module and one line here (docs/ARCHITECTURE.md has a
worked example).

    classify  pair  regress     kjax/finetune/sentence_tasks.py
    ner                         kjax/finetune/ner.py
    qa                          kjax/finetune/qa.py
    choice                      kjax/finetune/choice.py
    wic                         kjax/finetune/wic.py
"""
from __future__ import annotations

from kjax.errors import KjaxError
from kjax.finetune.choice import Choice
from kjax.finetune.contract import Task
from kjax.finetune.ner import NamedEntities
from kjax.finetune.qa import QuestionAnswering
from kjax.finetune.sentence_tasks import Classify, Pair, Regress
from kjax.finetune.wic import WordInContext

TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Adds `task` under its name (`kjax finetune --task NAME`)."""
    if not task.name or task.name in TASKS:
        raise ValueError(f"task name {task.name!r} is empty or taken ({', '.join(TASKS)})")
    TASKS[task.name] = task
    return task


for _task in (Classify(), Pair(), Regress(), NamedEntities(), QuestionAnswering(), Choice(),
              WordInContext()):
    register(_task)


def finetune_task(task) -> Task:
    """The task a name selects (a Task passes through)."""
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise KjaxError(f"--task {task!r}; choose one of {', '.join(TASKS)}")
    return TASKS[task]
