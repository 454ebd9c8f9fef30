"""The counterfactual: what a speculating endpoint's output would have cost without
speculation, and which one is in force (ECONOMICS.md §3b).

- in_force: for one endpoint, the rule that picks the plain curve, B* and h it is
  assessed under (control, baseline, profile or sweep, roofline, configured) and each of
  their sources: the control lookups, its own baseline fit, the profile it names, the
  roofline prior, and the step overheads it learns against its control;
- profile_book: the profiles the endpoints teach, saved to the store and read back hourly.

The step model itself and the speedup it gives are spectax.economics.step_model's; the
stored rows are spectax.store.profiles'.
"""
