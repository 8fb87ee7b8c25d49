"""The GraphDef room, below capture, patches and the execution: a changed copy of the step's GraphDef imported onto
the user's variables (`importer`), and the round trip written once (`roundtrip`): that copy as a tf.function of the
step's own arguments, traced again with the first trace's sites. The capture's taps, the patches and the seeded
restart are each a change to the GraphDef; this is how every one of them runs."""
