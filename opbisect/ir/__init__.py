"""The op graph IR: ids, the graph, the op-type table."""
