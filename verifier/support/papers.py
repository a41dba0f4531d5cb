"""The papers whose claims the verifier checks, and how results cite them.

Verdicts, `verify list` and the errata cite the short form with the arXiv id and the place in the
paper (`cite`); the docs give the full reference (`Paper.full`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paper:
    short: str  # authors and year, as output cites them
    arxiv: str
    full: str

    def cite(self, where: str) -> str:
        """``Bhattamishra et al. 2024, arXiv:2406.09347, Theorem 1, Appendix C.2``."""
        return f"{self.short}, arXiv:{self.arxiv}, {where}"


BHATTAMISHRA_2024 = Paper(
    "Bhattamishra et al. 2024", "2406.09347",
    'S. Bhattamishra, M. Hahn, P. Blunsom, V. Kanade, "Separations in the Representational Capabilities of '
    'Transformers and Recurrent Architectures", NeurIPS 2024, arXiv:2406.09347')
CHEN_ZOU_2024 = Paper(
    "Chen and Zou 2024", "2404.01601",
    'X. Chen, D. Zou, "What Can Transformer Learn with Varying Depth? Case Studies on Sequence Learning Tasks", '
    'ICML 2024, arXiv:2404.01601')
SANFORD_HSU_TELGARSKY_2024 = Paper(
    "Sanford, Hsu, Telgarsky 2024", "2408.14332",
    'C. Sanford, D. Hsu, M. Telgarsky, "One-layer transformers fail to solve the induction heads task", '
    'arXiv:2408.14332, 2024')
CHEN_PENG_WU_2024 = Paper(
    "Chen, Peng, Wu 2024", "2412.02975",
    'L. Chen, B. Peng, H. Wu, "Theoretical limitations of multi-layer Transformer", arXiv:2412.02975, 2024')
SANFORD_HSU_TELGARSKY_2024B = Paper(
    "Sanford, Hsu, Telgarsky 2024b", "2402.09268",
    'C. Sanford, D. Hsu, M. Telgarsky, "Transformers, parallel computation, and logarithmic depth", ICML 2024, '
    'arXiv:2402.09268')
YAO_2021 = Paper(
    "Yao et al. 2021", "2105.11115",
    'S. Yao, B. Peng, C. Papadimitriou, K. Narasimhan, "Self-Attention Networks Can Process Bounded Hierarchical '
    'Languages", ACL 2021, arXiv:2105.11115')
