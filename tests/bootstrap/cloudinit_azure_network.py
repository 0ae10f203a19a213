"""Run by the interpreter cloud-init is installed for (Debian's /usr/bin/python3), not by pytest's.

For each case on stdin ({"name", "cfg_d": {file: text}, "network": IMDS network metadata}) it does
what cloud-init does at init-local on an Azure VM: merge /etc/cloud/cloud.cfg with cloud.cfg.d
(util.read_conf_with_confd), build DataSourceAzure with that system config and the IMDS metadata,
pick the network configuration as stages.Init does (a system config may disable it), and render it
with cloud-init's netplan renderer. Prints, per case, the addresses netplan would bind.
"""

import json
import os
import sys
import tempfile

import yaml
from cloudinit import distros, helpers, stages, util
from cloudinit.net import netplan, network_state
from cloudinit.sources import DataSourceAzure


def addresses(case):
    tmp = tempfile.mkdtemp()
    etc = os.path.join(tmp, "etc/cloud")
    os.makedirs(os.path.join(etc, "cloud.cfg.d"))
    with open(os.path.join(etc, "cloud.cfg"), "w") as f:
        paths = {"cloud_dir": f"{tmp}/var/lib/cloud", "run_dir": f"{tmp}/run/cloud-init", "templates_dir": tmp}
        yaml.safe_dump({"datasource_list": ["Azure"], "system_info": {"distro": "ubuntu", "paths": paths}}, f)
    for name, text in case["cfg_d"].items():
        with open(os.path.join(etc, "cloud.cfg.d", name), "w") as f:
            f.write(text)
    sys_cfg = util.read_conf_with_confd(os.path.join(etc, "cloud.cfg"))
    paths = helpers.Paths(sys_cfg["system_info"]["paths"])
    distro = distros.fetch("ubuntu")("ubuntu", sys_cfg, paths)
    ds = DataSourceAzure.DataSourceAzure(sys_cfg, distro, paths)
    ds._metadata_imds = {"network": case["network"]}
    init = stages.Init()
    init._cfg = sys_cfg
    init.datasource = ds
    ncfg, source = init._find_networking_config()
    if ncfg is None:
        return {"name": case["name"], "source": str(source), "disabled": True, "addresses": []}
    state = network_state.parse_net_config_data(ncfg)
    netplan.Renderer({"netplan_path": "etc/netplan/50-cloud-init.yaml", "postcmds": False}).render_network_state(
        state, target=tmp
    )
    with open(os.path.join(tmp, "etc/netplan/50-cloud-init.yaml")) as f:
        plan = yaml.safe_load(f)
    bound = [a for eth in plan["network"].get("ethernets", {}).values() for a in eth.get("addresses", [])]
    return {"name": case["name"], "source": str(source), "disabled": False, "addresses": bound}


print(json.dumps([addresses(case) for case in json.load(sys.stdin)]))
