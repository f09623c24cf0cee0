// The official TypeScript MCP SDK client, relayed for tests/agents/test_mcp_typescript.py.
//
// Usage: node relay.mjs COMMAND [ARGS...] < calls.json
// Starts COMMAND as an MCP server over stdio (with the environment it was given), then prints one
// JSON object on stdout: the server's version and instructions as the SDK reports them, the tools it
// lists, and for each call in calls.json ([{"name": ..., "arguments": {...}}, ...]) the SDK's result
// (structuredContent, content, isError, _meta) or, where the SDK itself throws, its error message.
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [command, ...args] = process.argv.slice(2);
const calls = JSON.parse(readFileSync(0, "utf8") || "[]");
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
const client = new Client({ name: "camillo-ts-relay", version: "1.0.0" });
await client.connect(transport);
const out = {
  serverVersion: client.getServerVersion(),
  instructions: client.getInstructions(),
  tools: (await client.listTools()).tools,
  results: [],
};
for (const call of calls) {
  try {
    out.results.push(await client.callTool({ name: call.name, arguments: call.arguments ?? {} }));
  } catch (err) {
    out.results.push({ thrown: String(err && err.message ? err.message : err) });
  }
}
await client.close();
process.stdout.write(JSON.stringify(out));
