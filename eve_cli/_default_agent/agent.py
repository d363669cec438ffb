"""The built-in agent used when there is no ``agent/`` folder: it runs offline on ``demo``."""

from eve_cli import define_agent

agent = define_agent(model="demo", name="default")
