"""Model families and tiny checkpoint generators."""
