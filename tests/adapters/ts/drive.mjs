// Drives an adapted agent with the official TypeScript SDK's client over the stdio of
// agent processes it spawns: streaming, a plain tool, approval (allow, reject, dismiss)
// and cancel in a first process, then session/load and one more turn in a second one.
// Usage: node drive.mjs CONFIG_JSON, with {command: [...], cwd, agentCwd, plain,
// approval}; prints what each step produced as one JSON line.
import { client, ndJsonStream } from "@agentclientprotocol/sdk";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { Readable, Writable } from "node:stream";

const config = JSON.parse(process.argv[2]);
let updates = [];
let asked = [];
let option = "allow_once";
let firstChunk = null;

const app = client({ name: "ts-adapters" })
  .onNotification("session/update", ({ params }) => {
    updates.push(params.update);
    if (params.update.sessionUpdate === "agent_message_chunk" && firstChunk) {
      firstChunk();
      firstChunk = null;
    }
  })
  .onRequest("session/request_permission", async ({ params }) => {
    asked.push(params.toolCall.toolCallId);
    if (option === null) return { outcome: { outcome: "cancelled" } };
    return { outcome: { outcome: "selected", optionId: option } };
  });

// One agent process for the length of `op`; its stdin is closed and its exit awaited.
async function withAgent(op) {
  const [command, ...args] = config.command;
  const child = spawn(command, args, { cwd: config.agentCwd, stdio: ["pipe", "pipe", "inherit"] });
  const exited = once(child, "exit");
  const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  try {
    return await app.connectWith(stream, async (agent) => {
      await agent.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
      return await op(agent);
    });
  } finally {
    if (!child.stdin.destroyed) child.stdin.end();
    const [code] = await exited;
    if (code !== 0) throw new Error(`the agent exited with ${code}`);
  }
}

function take(answer) {
  const calls = {};
  for (const u of updates) {
    if (u.sessionUpdate !== "tool_call" && u.sessionUpdate !== "tool_call_update") continue;
    const call = (calls[u.toolCallId] ??= { statuses: [], content: "" });
    if (u.status) call.statuses.push(u.status);
    for (const item of u.content ?? []) {
      if (item.type === "content") call.content += item.content.text;
    }
  }
  const texts = (kind) =>
    updates.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text);
  const result = {
    stop: answer.stopReason,
    kinds: updates.map((u) => u.sessionUpdate),
    texts: texts("agent_message_chunk"),
    users: texts("user_message_chunk"),
    calls,
    asked,
  };
  updates = [];
  asked = [];
  return result;
}

const results = {};
const sessionId = await withAgent(async (agent) => {
  const { sessionId } = await agent.request("session/new", { cwd: config.cwd, mcpServers: [] });
  updates = [];
  const prompt = async (text) =>
    take(await agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text }] }));
  results.chunked = await prompt("fake:chunked");
  results.plain = await prompt(config.plain);
  for (const choice of ["allow_once", "reject_once", null]) {
    option = choice;
    results[`approval ${choice}`] = await prompt(config.approval);
  }
  const chunk = new Promise((resolve) => {
    firstChunk = resolve;
  });
  const cut = prompt("fake:slow");
  await chunk;
  await agent.notify("session/cancel", { sessionId });
  results.cancelled = await cut;
  return sessionId;
});
await withAgent(async (agent) => {
  await agent.request("session/load", { sessionId, cwd: config.cwd, mcpServers: [] });
  results.loaded = take(
    await agent.request("session/prompt", {
      sessionId,
      prompt: [{ type: "text", text: "fake:echo" }],
    }),
  );
});
console.log(JSON.stringify(results));
