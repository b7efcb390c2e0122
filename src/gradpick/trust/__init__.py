"""Checks that say how far an attribution map can be trusted, run on the picked images.

* ``randomisation``: the model-parameter randomisation test (Adebayo et al., 2018).
* ``completeness``: Integrated Gradients' sum against F(x) - F(baseline), with automatic steps.
* ``faithfulness``: deletion and insertion curves against a random order, and their areas.
* ``road``: ROAD, MoRF and LeRF curves with the removed pixels filled from their neighbours.
* ``contrastive``: the top classes' maps and a contrast logit A - logit B from one forward.
* ``sensitivity``: class sensitivity, each map against the maps of other classes.
* ``report``: all of them at once, and the JSON report ``gradpick check`` writes.
* ``chunks``: all of them over any number of picks, a few at a time, as one report.
* ``quick``: the cheap checks behind the explorer's badges, within a time budget per click.
* ``agreement``: whether a shown map's peak lies where occlusion finds the evidence.

Every map comes from the attribution methods through ``engine.attribute_maps``.
"""

from gradpick.trust.agreement import PeakAgreement, occlusion_agreement
from gradpick.trust.chunks import run_checks_in_chunks
from gradpick.trust.completeness import Completeness, completeness
from gradpick.trust.contrastive import ClassMaps, class_maps
from gradpick.trust.engine import MethodSettings
from gradpick.trust.faithfulness import Curves, attribution_order, faithfulness
from gradpick.trust.metrics import spearman, ssim
from gradpick.trust.quick import QuickChecks, quick_checks
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
    "PeakAgreement",
    "QuickChecks",
    "RandomisationCurve",
    "RoadCurves",
    "TrustReport",
    "attribution_order",
    "class_maps",
    "class_sensitivity",
    "completeness",
    "faithfulness",
    "impute",
    "occlusion_agreement",
    "quick_checks",
    "randomisation_test",
    "report_dict",
    "road",
    "run_checks",
    "run_checks_in_chunks",
    "spearman",
    "ssim",
]
