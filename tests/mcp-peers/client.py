"""An MCP client built on the official Python SDK (mcp==2.3.0), for wrap_peers.rs.

Connects over stdio to CMD ARGS with `mcp.Client` (a ClientSession over stdio_client),
or over Streamable HTTP when the command is one http:// URL, in the given mode, lists the tools, makes the planned calls and writes what it got as
JSON to OUT: {"protocol", "tools": [names], "calls": [{"isError", "text", "result"}]}.
Only strings and booleans are written, so the test's small JSON reader takes it.

Usage: client.py MODE OUT PLAN_JSON [NAME=VALUE ...] -- CMD ARGS...
       client.py MODE OUT PLAN_JSON -- http://HOST:PORT/PATH
  MODE: legacy (initialize handshake) or auto (server/discover, falling back); with
        "+nolist" (legacy+nolist) the client calls without listing first, as a client
        that cached its tool list from an earlier session does
  PLAN_JSON: [{"tool": NAME, "arguments": {...}} or {"list": true}, ...]; a "list" step
        lists the tools again and adds that listing, as JSON text, to "listings"
  NAME=VALUE: environment handed to the server process
  AEGIS_TEST_ELICIT=accept|decline|never (client's own environment): install an
        elicitation callback answering every question so (approve true, decline, or no
        answer until the server withdraws the question); each question's
        message is added to "elicited"
  AEGIS_TEST_PROGRESS=FILE (client's own environment): give each call a progress
        callback, which appends each progress notification's message to FILE as a line
        as it arrives (so a test can wait for one)
"""

import json
import sys

import os

import anyio
from mcp import Client, StdioServerParameters, types


async def run(mode, out, plan, env, command):
    if len(command) == 1 and command[0].startswith("http://"):
        params = command[0]
    else:
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    mode, _, nolist = mode.partition("+")
    got = {"mode": mode, "tools": [], "calls": [], "listings": [], "elicited": []}
    answer = os.environ.get("AEGIS_TEST_ELICIT")
    extra = {}
    if answer:

        async def elicit(context, params):
            got["elicited"].append(params.message)
            if answer == "accept":
                return types.ElicitResult(action="accept", content={"approve": True})
            if answer == "never":
                # A user who never answers: the question stays open until the server
                # withdraws it (notifications/cancelled ends this handler).
                await anyio.sleep_forever()
            return types.ElicitResult(action="decline")

        extra["elicitation_callback"] = elicit
    async with Client(params, mode=mode, cache=None, **extra) as client:
        got["protocol"] = str(client.session.protocol_version)
        if nolist != "nolist":
            listing = await client.list_tools()
            got["tools"] = [t.name for t in listing.tools]
        for step in plan:
            if step.get("list"):
                listing = await client.list_tools()
                dumped = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listing.tools]
                got["listings"].append(json.dumps(dumped, sort_keys=True))
                continue
            progress = None
            progress_file = os.environ.get("AEGIS_TEST_PROGRESS")
            if progress_file:

                async def progress(done, total, message):
                    with open(progress_file, "a") as f:
                        f.write(f"{message}\n")

            result = await client.call_tool(
                step["tool"], step.get("arguments", {}), progress_callback=progress
            )
            dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
            got["calls"].append(
                {
                    "tool": step["tool"],
                    "isError": bool(result.is_error),
                    "text": "".join(
                        c.text for c in result.content if getattr(c, "type", "") == "text"
                    ),
                    "result": json.dumps(dumped, sort_keys=True),
                }
            )
    with open(out, "w") as f:
        json.dump(got, f)


def main():
    args = sys.argv[1:]
    split = args.index("--")
    mode, out, plan, *pairs = args[:split]
    env = dict(p.split("=", 1) for p in pairs)
    anyio.run(run, mode, out, json.loads(plan), env, args[split + 1 :])


if __name__ == "__main__":
    main()
