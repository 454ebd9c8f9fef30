"""Where spend comes from: the price-table estimate, and the bills of billing sources.

One module per source (`price_table`, `aws_cost_explorer`, `runpod`, `opencost`,
`focus`), each normalising its provider's answers into `base.BillingLine`s;
`registry` maps a config `type:` to its module, `reconcile` compares estimate
and bill, `service` runs the sources inside the daemon, `cli` is
`spectax billing fetch`.
"""
