"""Bodies of the offline commands: aot, train_value, train_prm (thin absl mains in experiments/)."""
