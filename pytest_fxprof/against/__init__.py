"""Against a revision: the base revision's code from git, the old and new sides measured in alternating pairs of
fresh processes, and the check that the old side ran the old code.

Must not import torch or pytest.
"""
