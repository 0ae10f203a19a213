"""Run by the interpreter cloud-init is installed for (Debian's /usr/bin/python3), not by pytest's.

Reads {"user_data", "root", "moved": {absolute path: path under root}} on stdin and does what
cloud-init does with a host's customData across boots: its write_files handler writes every file
under ``root`` (the paths rebased there, under a hostile umask: cloud-init must set the modes
itself), then, per boot, its scripts-per-boot module's runparts runs the per-boot directory of
cloud-init's own path layout (helpers.Paths, cloud_dir rebased). Prints JSON: where that directory
is, the module lists of the system cloud.cfg, each file's mode, and per boot whether runparts
raised.
"""

import grp
import json
import os
import pwd
import sys

import yaml
from cloudinit import helpers, subp, util
from cloudinit.config import cc_write_files


def main():
    case = json.load(sys.stdin)
    root = case["root"]
    doc = yaml.safe_load(case["user_data"])
    files = []
    for f in doc["write_files"]:
        g = dict(f)
        g["path"] = root + f["path"]
        for old, new in case["moved"].items():
            g["content"] = g["content"].replace(old, new)
        files.append(g)
    os.umask(0o077)
    owner = f"{pwd.getpwuid(os.getuid()).pw_name}:{grp.getgrgid(os.getgid()).gr_name}"  # root:root on a host
    cc_write_files.write_files("write_files", files, owner)
    # cloud-init's own layout: scripts/per-boot under cloud_dir (/var/lib/cloud on a host).
    per_boot = os.path.join(helpers.Paths({"cloud_dir": root + "/var/lib/cloud"}).get_cpath("scripts"), "per-boot")
    boots = []
    for marker in case["boots"]:
        if marker:
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            with open(marker, "w") as out:
                out.write("bundle 0123, 0 step lines failed\n")
        try:
            subp.runparts(per_boot)
            boots.append("ok")
        except RuntimeError as err:
            boots.append(str(err))
    cfg = util.read_conf("/etc/cloud/cloud.cfg")
    print(
        json.dumps(
            {
                "per_boot": per_boot[len(root) :],
                "modes": {f["path"][len(root) :]: oct(os.stat(f["path"]).st_mode & 0o777) for f in files},
                "boots": boots,
                "init_modules": cfg.get("cloud_init_modules", []),
                "final_modules": cfg.get("cloud_final_modules", []),
            }
        )
    )


main()
