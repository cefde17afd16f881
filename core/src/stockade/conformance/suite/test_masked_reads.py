"""What a command sees of a masked credential store, as the docs say, on each backend.

A masked file cannot be opened (``Permission denied``); a masked directory is empty to a
provider that keeps ``private-view`` (bubblewrap's tmpfs), and lists its names but opens
nothing to one that does not (Landlock). The control: a file beside the stores reads as planted.
"""

from __future__ import annotations

import json

import pytest

from stockade.confine.promises import Promise

PROBE = """
import errno, json, os, sys
home = sys.argv[1]
out = {}
def attempt(name, fn):
    try:
        out[name] = fn()
    except OSError as error:
        out[name] = errno.errorcode[error.errno]
attempt("file", lambda: open(os.path.join(home, ".netrc")).read())
attempt("write", lambda: open(os.path.join(home, ".netrc"), "w").write("x"))
attempt("listing", lambda: sorted(os.listdir(os.path.join(home, ".ssh"))))
attempt("inside", lambda: open(os.path.join(home, ".ssh", "id_ed25519")).read())
attempt("control", lambda: open(os.path.join(home, "notes.txt")).read())
print(json.dumps(out))
"""


@pytest.mark.promise(Promise.CREDENTIAL_STORES)
def test_a_masked_store_reads_as_the_docs_say(host, box, mode):
    (box.home / ".netrc").write_text(box.canary)
    (box.home / ".ssh").mkdir()
    (box.home / ".ssh" / "id_ed25519").write_text(box.canary)
    (box.home / "notes.txt").write_text("CONTROL")
    result = host.run(box.py(PROBE, str(box.home), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    assert box.canary not in result.stdout.text
    out = json.loads(result.stdout.text)
    assert out.pop("control") == "CONTROL"
    if box.keeps(Promise.PRIVATE_VIEW):
        expected = {"listing": [], "inside": "ENOENT"}
    else:
        expected = {"listing": ["id_ed25519"], "inside": "EACCES"}
    assert out == {"file": "EACCES", "write": "EACCES", **expected}, out


SWAPPED = """
import sys
for path in sys.argv[1:]:
    try:
        print(path, open(path).read())
    except OSError as error:
        print(path, 'refused', error.errno)
"""


@pytest.mark.promise(Promise.SWAP_SAFE)
def test_a_store_whose_folder_is_swapped_for_a_link_after_confine_stays_masked(
    host, box, monkeypatch
):
    """The race of a command running beside this one, made deterministic: the swap happens
    right after the provider's ``confine`` returned, before its plan is started. The
    control: a plain file beside the store, in the moved folder, reads as planted.
    (In ``workspace-write``: a store in the workspace is masked where it is writable.)"""
    store = box.ws / "sub" / ".aws"
    store.mkdir(parents=True)
    (store / "credentials").write_text(box.canary)
    (box.ws / "sub" / "plain").write_text("CONTROL")
    (box.ws / "decoy" / ".aws").mkdir(parents=True)  # where a mask would land instead
    real = box.provider.confine
    swapped: list[bool] = []

    def confine_then_swap(self, spec):
        plan = real(self, spec)
        if not swapped:
            (box.ws / "sub").rename(box.ws / "moved")
            (box.ws / "sub").symlink_to("decoy")  # relative: it resolves inside a sandbox too
            swapped.append(True)
        return plan

    monkeypatch.setattr(box.provider, "confine", confine_then_swap)
    moved = box.ws / "moved"
    result = host.run(box.py(SWAPPED, str(moved / "plain"), str(moved / ".aws" / "credentials")))
    assert swapped
    assert f"{moved / 'plain'} CONTROL" in result.stdout.text, result.stderr.text
    assert box.canary not in result.stdout.text + result.stderr.text
