"""Map the source tree onto one import root.

core/ is the package ``turnout``, plugins/ is ``turnout.plugins``.
"""

from setuptools import find_packages, setup

PACKAGE_DIRS = {"turnout": "core", "turnout.plugins": "plugins"}

packages = [
    f"{root}.{sub}" if sub else root
    for root, directory in PACKAGE_DIRS.items()
    for sub in ["", *find_packages(directory)]
]

setup(packages=packages, package_dir=PACKAGE_DIRS)
