"""The vocabulary of requests: modes, kinds, verdicts, origins, the closed sets of names."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

Mode = Literal["read-only", "workspace-write", "danger-full-access"]
Kind = Literal["reads", "writes", "network", "destroys"]
Verdict = Literal["allow", "ask", "deny"]
Origin = Literal["cli", "api", "mcp"]
Autonomy = Literal["standard", "read-only"]
BreakerSetting = Literal["on", "off-allow-exfiltration"]
TaintKind = Literal["private", "untrusted"]
Enforcement = Literal["full", "partial"]
Protection = Literal["read-only", "put-back"]
LimitName = Literal["memory", "processes", "file_size", "cpu", "quota"]
ChangeMethod = Literal["inotify", "scan", "layer"]
Writes = Literal["layered", "direct"]
Commit = Literal["always", "on-success", "ask", "never"]
Landed = Literal["landed", "discarded", "over-quota", "waiting", "refused"]
COMMITS: tuple[Commit, ...] = ("always", "on-success", "ask")
"""What a profile's ``commit`` may say (``never`` is a dry run's, per request)."""
HiddenKind = Literal[
    "private", "credential-store", "system-secret", "deny-read", "store", "socket", "private-data"
]

ClassifierRule = Callable[[Sequence[str]], "tuple[Kind, str]"]
"""``rule(args)``: the class of a program's command and why, from the arguments after it."""

MODES: tuple[Mode, ...] = ("read-only", "workspace-write", "danger-full-access")
KINDS: tuple[Kind, ...] = ("reads", "writes", "network", "destroys")
"""Classes of effect, least severe first: the order in which votes are ranked."""
ORIGINS: tuple[Origin, ...] = ("cli", "api", "mcp")
AUTONOMIES: tuple[Autonomy, ...] = ("standard", "read-only")
BREAKER_SETTINGS: tuple[BreakerSetting, ...] = ("on", "off-allow-exfiltration")

DOTFILES = frozenset(
    {
        ".bashrc",
        ".bash_profile",
        ".bash_login",
        ".bash_logout",
        ".bash_aliases",
        ".zshrc",
        ".zprofile",
        ".zshenv",
        ".zlogin",
        ".zlogout",
        ".profile",
        ".kshrc",
        ".cshrc",
        ".tcshrc",
        ".login",
        ".logout",
        ".inputrc",
        ".pam_environment",
        ".xprofile",
        ".xsessionrc",
        ".xinitrc",
        ".gitconfig",
        ".gitmodules",
        ".ripgreprc",
        ".yarnrc",
        ".yarnrc.yml",
        ".pdbrc",
        ".exrc",
        ".vimrc",
        ".tmux.conf",
    }
)
