"""`agk image`: a role's build script or manifest on stdout; an unverified row is one line and status 2."""

from __future__ import annotations

from modules.images.build import script
from modules.images.recipe import recipe

from .badinput import agk


def test_prints_the_build_script_and_the_manifest() -> None:
    done = agk("image", "--role", "etcd", "--kubernetes", "1.36")
    assert (done.code, done.err) == (0, "")
    assert done.out == script(recipe("etcd", "1.36"))
    done = agk("image", "--role", "nat", "--kubernetes", "1.35.8", "--manifest")
    assert (done.code, done.err) == (0, "")
    assert done.out == recipe("nat", "1.35").manifest_json()


def test_an_unverified_row_is_one_line_and_status_2() -> None:
    done = agk("image", "--role", "gpu-node", "--kubernetes", "1.37")
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "error: azure-gpu-k8s:image_build.kubernetes_version: kubelet 1.37.2: no verified sha256 in "
        "modules/bootstrap/versions.py (a placeholder or none): add the sha256 the release publishes, with its "
        "source, to that row, or choose a version whose row has one\n"
    )


def test_a_patch_without_binaries_and_an_unknown_role_are_refused() -> None:
    done = agk("image", "--role", "apiserver", "--kubernetes", "1.36.2")
    assert (done.code, done.out) == (2, "")
    assert done.err.count("\n") == 1 and "1.36.2" in done.err and "build 1.36.4" in done.err
    done = agk("image", "--role", "bastion", "--kubernetes", "1.36")
    assert (done.code, done.out) == (2, "")
    assert done.err.startswith("error: --role: ") and done.err.count("\n") == 1
