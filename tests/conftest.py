import os

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("MMTOKEN_PROGRESS", "off")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")
