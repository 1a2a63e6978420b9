// Drives the reference agent at URL through its command table with the official
// TypeScript SDK's Streamable HTTP client (URL http:// or https://) or its WebSocket
// client (ws:// or wss://, on the `ws` package); prints what each command produced as
// JSON. Over TLS, node trusts the authority named by NODE_EXTRA_CA_CERTS.
import { client } from "@agentclientprotocol/sdk";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import { readFile, writeFile } from "node:fs/promises";
import { WebSocket } from "ws";

const [url, cwd] = process.argv.slice(2);
const stream = url.startsWith("ws")
  ? createWebSocketStream(url, { WebSocket })
  : createHttpStream(url);
const updates = [];
const app = client({ name: "ts-interop" })
  .onNotification("session/update", ({ params }) => {
    updates.push(params.update);
  })
  .onRequest("fs/read_text_file", async ({ params }) => ({
    content: await readFile(params.path, "utf8"),
  }))
  .onRequest("fs/write_text_file", async ({ params }) => {
    await writeFile(params.path, params.content);
    return {};
  })
  .onRequest("session/request_permission", async ({ params }) => ({
    outcome: {
      outcome: "selected",
      optionId: params.options.find((o) => o.kind === "allow_once").optionId,
    },
  }))
  .onRequest("terminal/create", async () => ({ terminalId: "t1" }))
  .onRequest("terminal/output", async () => ({ output: "hi\n", truncated: false }))
  .onRequest("terminal/wait_for_exit", async () => ({ exitCode: 0 }))
  .onRequest("terminal/release", async () => ({}))
  .onRequest("terminal/kill", async () => ({}));

const commands = [
  "/echo hello ts",
  "/stream 5 3",
  "/think deeply",
  "/plan 2",
  "/tools 2",
  "/read in.txt",
  "/write out.txt written by ts",
  "/run echo hi",
  "/help",
  "plain words",
  "/fail -32042 on purpose",
];
const results = {};
await app.connectWith(stream, async (agent) => {
  await agent.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
  });
  const { sessionId } = await agent.request("session/new", { cwd, mcpServers: [] });
  for (const text of commands) {
    updates.length = 0;
    try {
      const answer = await agent.request("session/prompt", {
        sessionId,
        prompt: [{ type: "text", text }],
      });
      results[text] = {
        stop: answer.stopReason,
        kinds: updates.map((u) => u.sessionUpdate),
        texts: updates
          .filter((u) => u.sessionUpdate === "agent_message_chunk")
          .map((u) => u.content.text),
      };
    } catch (error) {
      results[text] = { error: { code: error.code, message: error.message } };
    }
  }
  await agent.request("session/set_mode", { sessionId, modeId: "auto" });
  const listed = await agent.request("session/list", {});
  results.listed = listed.sessions.map((s) => s.sessionId).includes(sessionId);
});
console.log(JSON.stringify(results));
