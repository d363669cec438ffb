from eve_cli import define_agent

agent = define_agent(
    model="scripted:script.json", name="upgrade", instructions="You are a test agent."
)
