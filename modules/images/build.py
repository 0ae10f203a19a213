"""The image build script: a recipe rendered into bash an image builder runs as root on the base image.

Rows first, in the recipe's order: download (from the row's URL, or ``$AGK_ARTIFACT_BASE/<name>/<version>/<file>``
when a mirror is set), ``sha256sum -c`` against the table, install; the first mismatch stops the build with
one line naming the row, the expected and the actual sha256, and nothing after it is installed. Then the
distribution packages (``--no-install-recommends``, held), the no-surprise-restarts configuration, and last
the manifest.

No surprise restarts. Automatic upgrades are off (``APT::Periodic::Enable "0"``, which apt's
``apt.systemd.daily`` reads before it does anything, salsa.debian.org/apt-team/apt debian/apt.systemd.daily,
so neither apt-daily.timer nor apt-daily-upgrade.timer updates or upgrades): security patches arrive as image
rolls, which replace hosts one at a time through the etcd and API server gates, and 7,576 hosts do not each
fetch the archive's indexes every day through the NAT. Should someone turn them back on, unattended-upgrades
still skips the held packages (``Unattended-Upgrade::Package-Blacklist``, Python regular expressions:
mvo5/unattended-upgrades README.md, "Unattended-Upgrade::Package-Blacklist"). needrestart, which Ubuntu's
server images run after every apt transaction, only lists (``$nrconf{restart} = 'l'``) and never selects
etcd, the kubelet or containerd (``$nrconf{override_rc}``: "Override service default selection (hash of
regex)"; liske/needrestart@477e85b ex/needrestart.conf, which also evaluates every
``/etc/needrestart/conf.d/*.conf``). The API servers are static pods under the kubelet and containerd, so
those two exclusions keep needrestart away from them too.

A patch therefore reaches hosts as a new image: a newer pinned base image (``images.general``/``images.gpu``)
or a newer row, and a new build number. The script does not ``apt-get upgrade`` the base: on the HPC image
that could move the NVIDIA driver and InfiniBand stack the image installs (Azure/azhpc-images), and a rebuild
of the same inputs should give the same software.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

import jinja2

from modules.bootstrap.layout import PATHS
from modules.bootstrap.templating import environment
from modules.bootstrap.versions import NVIDIA_CONTAINER_TOOLKIT_MIN
from modules.images.recipe import MANIFEST, UNIT_DIR, Recipe

TEMPLATES = Path(__file__).parent / "templates"
APT_CONF = "/etc/apt/apt.conf.d/99agk-image"
"""Sorts after Ubuntu's 20auto-upgrades (apt reads apt.conf.d in lexical order; the last value wins)."""
NEEDRESTART_CONF = "/etc/needrestart/conf.d/agk.conf"
NEVER_RESTARTED = ("etcd", "kubelet", "containerd")
"""systemd units needrestart must never select (the API server runs under the kubelet and containerd)."""


def _environment() -> jinja2.Environment:
    return environment(TEMPLATES)


def apt_conf(recipe: Recipe) -> str:
    """``99agk-image``: no periodic apt runs; the held packages blacklisted for unattended-upgrades."""
    lines = [
        "// agk image: patches arrive as image rolls (modules/images/build.py).",
        'APT::Periodic::Enable "0";',
        'APT::Periodic::Update-Package-Lists "0";',
        'APT::Periodic::Download-Upgradeable-Packages "0";',
        'APT::Periodic::Unattended-Upgrade "0";',
        "Unattended-Upgrade::Package-Blacklist {",
        *(f'  "^{p}$";' for p in (*recipe.holds, *recipe.apt_names)),
        "};",
    ]
    return "\n".join(lines) + "\n"


def needrestart_conf() -> str:
    """``conf.d/agk.conf`` (perl, evaluated by needrestart.conf): list only; never select the cluster's units."""
    lines = [
        "# agk image: needrestart lists what an upgrade left on old libraries and restarts nothing; etcd,",
        "# the kubelet and containerd restart only through the agk gates or an image roll.",
        "$nrconf{restart} = 'l';",
        *(f"$nrconf{{override_rc}}{{qr(^{unit}\\.service$)}} = 0;" for unit in NEVER_RESTARTED),
    ]
    return "\n".join(lines) + "\n"


def script(recipe: Recipe) -> str:
    """The bash build script of ``recipe`` (run as root on the base image)."""
    return (
        _environment()
        .get_template("build-image.sh.j2")
        .render(
            r=recipe,
            manifest=MANIFEST,
            toolkit_min=NVIDIA_CONTAINER_TOOLKIT_MIN,
            unit_dir=UNIT_DIR,
            manifest_dir=posixpath.dirname(MANIFEST),
            policy_rc=PATHS.policy_rc,
            apt_conf=APT_CONF,
            apt_conf_dir=posixpath.dirname(APT_CONF),
            apt_conf_text=apt_conf(recipe),
            needrestart_conf=NEEDRESTART_CONF,
            needrestart_conf_dir=posixpath.dirname(NEEDRESTART_CONF),
            needrestart_text=needrestart_conf(),
        )
    )
