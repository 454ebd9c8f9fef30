"""Where spend comes from: the price-table estimate, and the bills of billing sources.

`prices` is the price table (a lookup: the live spend is priced from it);
`sources/` holds one module per provider (`aws_cost_explorer`, `runpod`,
`opencost`, `focus`), each normalising its answers into `types.BillingLine`s;
`registry` maps a config `type:` to its settings model, one line per source;
`reconcile` holds the pure rules comparing estimate and bill, `ledger` applies them to
what the store holds; `coordinator` runs the sources inside
the daemon. `spectax billing fetch` is `spectax.cli.billing`.
"""
