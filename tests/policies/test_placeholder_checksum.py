"""The pack refuses a placeholder checksum wherever a resource carries one (issue 21): a plain input, the image
build script inside an Image Builder template (base64), a host's bundle inside a Key Vault secret (base64 gzip)."""

from __future__ import annotations

import base64
import gzip
import json

from policy_fixtures import RG, good_cluster, messages

from modules.images.build import script
from modules.images.recipe import recipe
from policies.rules.checksums import placeholders

ZEROS = "0" * 64
POLICY = "no-placeholder-checksum"


def test_a_placeholder_is_refused_wherever_it_sits() -> None:
    st = good_cluster()
    assert messages(st, POLICY) == []
    # A plain input (a tag that pins a download).
    st.add("azure-native:resources:ResourceGroup", "pinned", {"resourceGroupName": RG, "tags": {"cni-sha256": ZEROS}})
    # The build script of an image, as the images stack hands it to Image Builder (modules/azure/images.py).
    build = script(recipe("etcd", "1.35")).replace(recipe("etcd", "1.35").installs[0].sha256, ZEROS)
    encoded = base64.b64encode(build.encode()).decode()
    st.add(
        "azure-native:virtualmachineimages:VirtualMachineImageTemplate",
        "agk-etcd-36.4.1",
        {
            "resourceGroupName": RG,
            "customize": [
                {"type": "Shell", "inline": [f"echo {encoded} | base64 -d > /tmp/b.sh", "sudo bash /tmp/b.sh"]}
            ],
        },
    )
    # A host's bundle part: base64(gzip(JSON)) in a Key Vault secret (modules/bootstrap/delivery.py).
    part = base64.b64encode(gzip.compress(json.dumps({"files": {"/opt/x.sh": f"echo {ZEROS}"}}).encode())).decode()
    st.add(
        "azure-native:keyvault:Secret", "bundle-dev-etcd-0-0", {"resourceGroupName": RG, "properties": {"value": part}}
    )
    found = messages(st, POLICY)
    assert len(found) == 3, found
    assert found[0].startswith("resources:ResourceGroup pinned carries an all-zero sha256 at tags.cni-sha256")
    assert (
        "VirtualMachineImageTemplate agk-etcd-36.4.1 carries an all-zero sha256 at customize[0].inline[0]" in found[1]
    )
    assert "keyvault:Secret bundle-dev-etcd-0-0 carries an all-zero sha256 at properties.value" in found[2]
    assert found[2].endswith("in modules/bootstrap/versions.py and plan again")


def test_real_checksums_and_other_zeros_pass() -> None:
    assert not placeholders(script(recipe("gpu-node", "1.35")))
    assert not placeholders("00000000-0000-0000-0000-000000000000")  # a subscription id in the offline plan
    assert not placeholders("1" + ZEROS)  # 65 hex digits: not a sha256
    assert placeholders(f"sha256:{ZEROS}")
