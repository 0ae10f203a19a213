"""Node images as code: each role's image recipe from the versions table, and the script that builds it.

Pure (no Pulumi): ``recipe.py`` says, per role and Kubernetes release, which base image an image starts
from, which ``modules/bootstrap/versions.py`` rows it installs and where each lands, which distribution
packages it installs and holds, and the manifest (``/etc/agk/image.json``) it carries; ``build.py``
renders the recipe into the bash script an image builder runs on the base image.

Every row an image installs is downloaded once, at image build time, and checked against the table's
sha256 before it is installed; hosts booted from the image fetch nothing from GitHub, dl.k8s.io or
pkgs.k8s.io. A recipe that needs a row without a verified sha256 is refused (``versions.require_verified``).
"""

from typing import Literal

ImageRole = Literal["etcd", "apiserver", "system-node", "gpu-node", "prometheus", "nat"]
IMAGE_ROLES: tuple[ImageRole, ...] = ("etcd", "apiserver", "system-node", "gpu-node", "prometheus", "nat")
"""The images there are (events etcd boots the etcd image); light to import, for the command line."""


def gallery_name(stack: str) -> str:
    """The Compute Gallery of images stack ``stack``. Gallery names take letters, digits, '_' and '.' (no '-'):
    ``agk_<stack>``. The images stack creates it; a cluster stack names it in every image reference."""
    return "agk_" + stack.replace("-", "_")
