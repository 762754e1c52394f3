import { describe, expect, it } from "vitest";
import { policyShare, readEpisode, toolResultName } from "./episode";

// the shape of workers/core/episode.py `episode_record` for a calculator episode of two policy turns
const RECORD = {
  turns: 2,
  end: "done",
  turn_rewards: [null, 1.0],
  turn_spans: [[0, 12], [20, 23]],
  trained_tokens: 15,
  context_tokens: 8,
  messages: [
    { role: "system", content: "Use the calculate tool." },
    { role: "user", content: "What is 6 * 7?" },
    { role: "assistant", content: "", tool_calls: [{ id: "call_0_0", type: "function", function: { name: "calculate", arguments: { expression: "6 * 7" } } }] },
    { role: "tool", tool_call_id: "call_0_0", content: "42" },
    { role: "assistant", content: "42" },
  ],
  segments: [
    { start: 0, end: 12, trained: true, text: "<tool_call>...</tool_call>" },
    { start: 12, end: 20, trained: false, text: "<|im_end|>\n<|im_start|>tool\n42" },
    { start: 20, end: 23, trained: true, text: "42" },
  ],
};

describe("readEpisode", () => {
  it("reads the conversation with tool calls, marks the policy's turns and their step rewards", () => {
    const episode = readEpisode(RECORD);
    expect(episode).not.toBeNull();
    if (!episode) return;
    expect(episode.turns).toBe(2);
    expect(episode.end).toBe("done");
    expect(episode.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant"]);
    expect(episode.messages[2].toolCalls).toEqual([{ id: "call_0_0", name: "calculate", arguments: '{"expression":"6 * 7"}' }]);
    expect(episode.messages.map((m) => m.policyTurn)).toEqual([null, null, 1, null, 2]);
    expect(episode.messages[4].stepReward).toBe(1.0);
    expect(episode.messages[2].stepReward).toBeNull();
    expect(toolResultName(episode.messages, 3)).toBe("calculate"); // from the call it answers
    expect(episode.segments.filter((s) => !s.trained).map((s) => s.text)).toEqual(["<|im_end|>\n<|im_start|>tool\n42"]);
    expect(policyShare(episode)).toBeCloseTo(15 / 23);
  });

  it("is null for single-turn samples and survives malformed fields", () => {
    expect(readEpisode(null)).toBeNull();
    expect(readEpisode(undefined)).toBeNull();
    const odd = readEpisode({ turns: "3", messages: [5, { role: "assistant", content: { x: 1 }, tool_calls: [{ nope: 1 }] }], segments: "no" });
    expect(odd).toMatchObject({ turns: 0, end: null, segments: [], trainedTokens: 0, contextTokens: 0 });
    expect(odd?.messages).toHaveLength(1);
    expect(odd?.messages[0].content).toBe('{"x":1}');
    expect(odd?.messages[0].toolCalls).toEqual([]);
  });

  it("counts tokens from the segments when the totals are missing", () => {
    const episode = readEpisode({ ...RECORD, trained_tokens: undefined, context_tokens: undefined });
    expect(episode?.trainedTokens).toBe(15);
    expect(episode?.contextTokens).toBe(8);
  });
});

describe("gateway episodes", () => {
  it("reads each call's trained tokens, the context before it and its policy version", () => {
    const episode = readEpisode({ ...RECORD, turn_versions: [3, 4] });
    expect(episode?.gateway).toBe(true);
    const calls = episode?.messages.filter((m) => m.policyTurn !== null) ?? [];
    expect(calls.map((m) => [m.tokens, m.contextBefore, m.version])).toEqual([[12, 0, 3], [3, 8, 4]]);
    expect(calls[0].toolCalls[0].name).toBe("calculate");
  });

  it("a built-in episode has token counts per turn but no versions", () => {
    const episode = readEpisode(RECORD);
    expect(episode?.gateway).toBe(false);
    expect(episode?.messages.filter((m) => m.policyTurn !== null).map((m) => m.version)).toEqual([null, null]);
  });
});
