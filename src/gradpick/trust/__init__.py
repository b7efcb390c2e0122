"""Checks that say how far an attribution map can be trusted, run on the picked images.

* ``randomisation``: the model-parameter randomisation test (Adebayo et al., 2018).
* ``completeness``: Integrated Gradients' sum against F(x) - F(baseline), with automatic steps.
* ``faithfulness``: deletion and insertion curves against a random order, and their areas.
* ``contrastive``: the top classes' maps and a contrast logit A - logit B from one forward.
* ``report``: all of them at once, and the JSON report ``gradpick check`` writes.

Every map comes from the attribution methods through ``engine.attribute_maps``.
"""

from gradpick.trust.completeness import Completeness, completeness
from gradpick.trust.contrastive import ClassMaps, class_maps
from gradpick.trust.engine import MethodSettings
from gradpick.trust.faithfulness import Curves, attribution_order, faithfulness
from gradpick.trust.metrics import spearman, ssim
from gradpick.trust.randomisation import RandomisationCurve, randomisation_test
from gradpick.trust.report import CheckOptions, TrustReport, report_dict, run_checks

__all__ = [
    "CheckOptions",
    "ClassMaps",
    "Completeness",
    "Curves",
    "MethodSettings",
    "RandomisationCurve",
    "TrustReport",
    "attribution_order",
    "class_maps",
    "completeness",
    "faithfulness",
    "randomisation_test",
    "report_dict",
    "run_checks",
    "spearman",
    "ssim",
]
