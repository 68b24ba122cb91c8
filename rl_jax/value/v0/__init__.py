"""V0: a value model of the prompt (state zero): model, loss, training, the online prior."""
