"""Checks that say how far an attribution map can be trusted, run on the picked images.

* ``randomisation``: the model-parameter randomisation test (Adebayo et al., 2018).
* ``completeness``: Integrated Gradients' sum against F(x) - F(baseline), with automatic steps.
* ``faithfulness``: deletion and insertion curves against a random order, and their areas.
* ``road``: ROAD, MoRF and LeRF curves with the removed pixels filled from their neighbours.
* ``contrastive``: the top classes' maps and a contrast logit A - logit B from one forward.
* ``sensitivity``: class sensitivity, each map against the maps of other classes.
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
from gradpick.trust.road import RoadCurves, impute, road
from gradpick.trust.sensitivity import ClassSensitivity, class_sensitivity

__all__ = [
    "CheckOptions",
    "ClassMaps",
    "ClassSensitivity",
    "Completeness",
    "Curves",
    "MethodSettings",
    "RandomisationCurve",
    "RoadCurves",
    "TrustReport",
    "attribution_order",
    "class_maps",
    "class_sensitivity",
    "completeness",
    "faithfulness",
    "impute",
    "randomisation_test",
    "report_dict",
    "road",
    "run_checks",
    "spearman",
    "ssim",
]
