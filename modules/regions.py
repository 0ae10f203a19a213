"""Azure public-cloud regions (ARM location names), so a typo in `location` fails before deploying.

Source: `az account list-locations --query "[].name"` for the public cloud (learn.microsoft.com,
"Azure geographies"), logical-only regions (`eastasiastage`, `eastus2euap`, ...) left out. A region
Azure adds after this list is a one-line change here.
"""

from __future__ import annotations

REGIONS: frozenset[str] = frozenset(
    {
        "australiacentral",
        "australiacentral2",
        "australiaeast",
        "australiasoutheast",
        "austriaeast",
        "brazilsouth",
        "brazilsoutheast",
        "canadacentral",
        "canadaeast",
        "centralindia",
        "centralus",
        "chilecentral",
        "eastasia",
        "eastus",
        "eastus2",
        "francecentral",
        "francesouth",
        "germanynorth",
        "germanywestcentral",
        "indonesiacentral",
        "israelcentral",
        "italynorth",
        "japaneast",
        "japanwest",
        "jioindiacentral",
        "jioindiawest",
        "koreacentral",
        "koreasouth",
        "malaysiawest",
        "mexicocentral",
        "newzealandnorth",
        "northcentralus",
        "northeurope",
        "norwayeast",
        "norwaywest",
        "polandcentral",
        "qatarcentral",
        "southafricanorth",
        "southafricawest",
        "southcentralus",
        "southeastasia",
        "southindia",
        "spaincentral",
        "swedencentral",
        "swedensouth",
        "switzerlandnorth",
        "switzerlandwest",
        "taiwannorth",
        "taiwannorthwest",
        "uaecentral",
        "uaenorth",
        "uksouth",
        "ukwest",
        "westcentralus",
        "westeurope",
        "westindia",
        "westus",
        "westus2",
        "westus3",
    }
)


def closest(name: str) -> str | None:
    """The region a mistyped name most likely meant (for the error message)."""
    import difflib

    found = difflib.get_close_matches(name.lower().replace(" ", ""), sorted(REGIONS), n=1, cutoff=0.75)
    return found[0] if found else None
