"""An OpenAI Agents SDK agent with one function tool, run against a gateway's /v1/responses."""

from __future__ import annotations

import asyncio
from typing import Any

import openai


def run_weather_agent(base_url: str, model_id: str, question: str, *, streamed: bool = False, **settings: Any):
    """Run the agent loop (tool forced on the first turn; the SDK resets the choice after the call);
    returns the run result and the cities the tool was called for."""
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel

    set_tracing_disabled(True)
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        cities.append(city)
        return f"It is sunny and 21 C in {city}."

    async def run():
        # closed inside its event loop: left to the garbage collector, its connections would be closed later on
        # whatever loop is running then (another test's), or on this closed one
        async with openai.AsyncOpenAI(
            base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120
        ) as client:
            agent = Agent(
                name="weather",
                instructions="You answer questions about the weather using the tool.",
                tools=[get_weather],
                model=OpenAIResponsesModel(model=model_id, openai_client=client),
                model_settings=ModelSettings(tool_choice="get_weather", **settings),
            )
            if not streamed:
                return await Runner.run(agent, question, max_turns=4)
            result = Runner.run_streamed(agent, question, max_turns=4)
            async for _ in result.stream_events():
                pass
            return result

    return asyncio.run(run()), cities
