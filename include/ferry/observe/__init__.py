"""What an operator watches: a flow's status and lag, the snapshot behind the Ferry page
and the Prometheus metrics, the page itself and the metrics endpoint."""
