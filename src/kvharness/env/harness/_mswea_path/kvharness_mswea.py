"""kvharness's side of a mini-swe-agent episode: runs inside mini-swe-agent's own environment.

This file is not part of the ``kvharness`` package: ``kvharness.env.harness.mini_swe_agent`` puts
its folder on ``PYTHONPATH`` of the ``mini`` process it starts (``.venv-mini-swe-agent``), whose
configuration names these two classes by import path (``kvharness_mswea.KvharnessEnvironment``,
``kvharness_mswea.TimedLitellmModel``). It imports only the standard library, pydantic and
mini-swe-agent itself, never kvharness.

* :class:`KvharnessEnvironment` is mini-swe-agent's *environment* (its ``execute(action)``
  protocol): each command goes, as one JSON line, over the socket whose descriptor is in
  ``KVHARNESS_MSWEA_FD`` to the kvharness process, which runs it in the episode's bubblewrap
  sandbox and answers with its output. When a command's output starts with mini-swe-agent's
  submission line (``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``, exit status 0), it asks kvharness to
  grade the repository, then ends the run as mini-swe-agent's own environments do (``Submitted``).
* :class:`TimedLitellmModel` is mini-swe-agent's ``LitellmModel``, unchanged, with the wall
  times (``time.time()``) each query was sent and answered kept in the message's ``extra`` as
  ``kvharness_call`` (also on the message of a reply that did not parse), so the trajectory
  file alone gives kvharness each model call's timing.

Link protocol (one JSON object per line, mini-swe-agent asks, kvharness answers):
``{"op": "run", "command": STR}`` -> ``{"output": STR, "returncode": INT, "exception_info": STR,
"over": BOOL}``; ``{"op": "submit"}`` -> ``{"output": STR, "over": BOOL}``. ``over``: the
episode's action budget is spent (the run ends, as at mini-swe-agent's own step limit).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import socket
import time
from typing import Any

from pydantic import BaseModel

SUBMIT_LINE = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
TIMING_KEY = "kvharness_call"


class _Link:
    """The socket to the kvharness process (inherited descriptor ``KVHARNESS_MSWEA_FD``)."""

    def __init__(self) -> None:
        fd = int(os.environ["KVHARNESS_MSWEA_FD"])
        self._sock = socket.socket(fileno=fd)
        self._file = self._sock.makefile("rwb")

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self._file.write(json.dumps(request).encode() + b"\n")
        self._file.flush()
        line = self._file.readline()
        if not line:
            raise RuntimeError("the kvharness process closed the link")
        reply: dict[str, Any] = json.loads(line)
        return reply


class KvharnessEnvironmentConfig(BaseModel):
    cwd: str = ""
    """Working directory of the commands (default: the repository, the sandbox's own)."""
    env: dict[str, str] = {}
    """Variables exported before each command (mini.yaml sets pagers to cat)."""
    timeout: int = 0
    """Not used: the kvharness sandbox's per-command limit applies."""


class KvharnessEnvironment:
    """mini-swe-agent's environment protocol over the kvharness sandbox (module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        self.config = KvharnessEnvironmentConfig(**kwargs)
        self._link = _Link()

    def execute(
        self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None
    ) -> dict[str, Any]:
        from minisweagent.exceptions import LimitsExceeded, Submitted

        command = str(action.get("command", ""))
        prefix = "".join(f"export {k}={shlex.quote(v)}; " for k, v in self.config.env.items())
        where = cwd or self.config.cwd
        if where:
            prefix += f"cd {shlex.quote(where)} && "
        reply = self._link.ask({"op": "run", "command": prefix + command})
        output = {
            "output": reply["output"],
            "returncode": reply["returncode"],
            "exception_info": reply["exception_info"],
        }
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_LINE and output["returncode"] == 0:
            submission = "".join(lines[1:])
            graded = self._link.ask({"op": "submit"})
            if not graded["over"]:
                raise Submitted(
                    {
                        "role": "exit",
                        "content": submission,
                        "extra": {"exit_status": "Submitted", "submission": submission},
                    }
                )
        if reply["over"]:
            raise LimitsExceeded(
                {
                    "role": "exit",
                    "content": "LimitsExceeded",
                    "extra": {"exit_status": "LimitsExceeded", "submission": ""},
                }
            )
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                }
            }
        }


class TimedLitellmModel:
    """mini-swe-agent's LitellmModel, each query's send and answer times kept (module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        from minisweagent.models.litellm_model import LitellmModel

        self._model = LitellmModel(**kwargs)
        self.config = self._model.config

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        from minisweagent.exceptions import FormatError

        sent = time.time()
        try:
            message: dict[str, Any] = self._model.query(messages, **kwargs)
        except FormatError as err:
            err.messages[0].setdefault("extra", {})[TIMING_KEY] = {
                "sent": sent,
                "done": time.time(),
            }
            raise
        message.setdefault("extra", {})[TIMING_KEY] = {"sent": sent, "done": time.time()}
        return message

    def format_message(self, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = self._model.format_message(**kwargs)
        return out

    def format_observation_messages(
        self,
        message: dict[str, Any],
        outputs: list[dict[str, Any]],
        template_vars: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self._model.format_observation_messages(
            message, outputs, template_vars
        )
        return out

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = self._model.get_template_vars(**kwargs)
        return out

    def serialize(self) -> dict[str, Any]:
        out: dict[str, Any] = self._model.serialize()
        return out
