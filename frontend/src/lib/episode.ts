/**
 * A stored sample's multi-turn `episode` (SamplePublic.episode, written by workers/core/episode.py `episode_record`):
 * the conversation, the turns and the response cut into the policy's tokens (trained) and the environment's
 * (context). The API types it as an open object, so it is read here field by field; anything malformed is dropped,
 * never thrown, so one odd row cannot blank the sample browser.
 */

export interface ToolCall {
  id: string;
  name: string;
  arguments: string; // as the policy wrote them (objects shown as compact JSON)
}

export interface EpisodeMessage {
  role: string; // system | user | assistant | tool
  content: string;
  name: string | null; // a tool result's tool
  toolCallId: string | null;
  toolCalls: ToolCall[]; // an assistant turn's calls
  toolCallErrors: string[]; // <tool_call> blocks that were not valid JSON
  policyTurn: number | null; // 1-based: the policy's own turns (the last `turns` assistant messages)
  stepReward: number | null; // the environment's reward for the step after this policy turn
  tokens: number | null; // a policy turn's own tokens (trained), from its turn span
  contextBefore: number | null; // context tokens between the previous turn and this one (tool results, markup)
  version: number | null; // a gateway call's policy version
}

export interface EpisodeSegment {
  start: number;
  end: number;
  trained: boolean; // policy tokens (loss mask 1) vs environment / tool tokens (context, never trained)
  text: string;
}

export interface Episode {
  turns: number;
  end: string | null; // done | max_turns | max_episode_tokens | error
  turnRewards: (number | null)[];
  messages: EpisodeMessage[];
  trainedTokens: number;
  contextTokens: number;
  segments: EpisodeSegment[];
  gateway: boolean; // a gateway episode: each policy turn is one recorded chat call of the agent (with its version)
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === "object" && !Array.isArray(v);
const num = (v: unknown, fallback = 0): number => (typeof v === "number" && Number.isFinite(v) ? v : fallback);
const text = (v: unknown): string => (typeof v === "string" ? v : v === null || v === undefined ? "" : JSON.stringify(v));
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

function toolCall(raw: unknown, index: number): ToolCall | null {
  if (!isObj(raw)) return null;
  const fn = isObj(raw.function) ? raw.function : raw;
  if (typeof fn.name !== "string") return null;
  return { id: typeof raw.id === "string" ? raw.id : `call-${index}`, name: fn.name, arguments: text(fn.arguments ?? {}) };
}

/** The episode of a sample row, or null for a single-turn sample. */
export function readEpisode(raw: unknown): Episode | null {
  if (!isObj(raw)) return null;
  const turns = num(raw.turns);
  const turnRewards = list(raw.turn_rewards).map((r) => (typeof r === "number" ? r : null));
  const messages: EpisodeMessage[] = list(raw.messages).filter(isObj).map((m) => ({
    role: typeof m.role === "string" ? m.role : "unknown",
    content: text(m.content),
    name: typeof m.name === "string" ? m.name : null,
    toolCallId: typeof m.tool_call_id === "string" && m.tool_call_id ? m.tool_call_id : null,
    toolCalls: list(m.tool_calls).map(toolCall).filter((c): c is ToolCall => c !== null),
    toolCallErrors: list(m.tool_call_errors).map(text),
    policyTurn: null,
    stepReward: null,
    tokens: null,
    contextBefore: null,
    version: null,
  }));
  const spans = list(raw.turn_spans).map((s) => (Array.isArray(s) && s.length === 2 ? [num(s[0]), num(s[1])] : null));
  const versions = Array.isArray(raw.turn_versions) ? raw.turn_versions.map((v) => (typeof v === "number" ? v : null)) : null;
  const assistant = messages.filter((m) => m.role === "assistant");
  assistant.slice(Math.max(0, assistant.length - turns)).forEach((m, i) => {
    m.policyTurn = i + 1;
    m.stepReward = turnRewards[i] ?? null;
    const span = spans[i];
    if (span) {
      m.tokens = span[1] - span[0];
      m.contextBefore = span[0] - (i > 0 ? (spans[i - 1]?.[1] ?? span[0]) : 0);
    }
    m.version = versions?.[i] ?? null;
  });
  const segments = list(raw.segments).filter(isObj).map((s) => ({
    start: num(s.start), end: num(s.end), trained: Boolean(s.trained), text: text(s.text),
  }));
  const fromSegments = (trained: boolean) => segments.filter((s) => s.trained === trained).reduce((n, s) => n + s.end - s.start, 0);
  return {
    turns,
    end: typeof raw.end === "string" ? raw.end : null,
    turnRewards,
    messages,
    trainedTokens: num(raw.trained_tokens, fromSegments(true)),
    contextTokens: num(raw.context_tokens, fromSegments(false)),
    segments,
    gateway: versions !== null,
  };
}

/** The name a tool result answers: its own `name`, else the call with its `tool_call_id` earlier on. */
export function toolResultName(messages: readonly EpisodeMessage[], index: number): string | null {
  const message = messages[index];
  if (message.name) return message.name;
  if (!message.toolCallId) return null;
  for (let i = index - 1; i >= 0; i--) {
    const call = messages[i].toolCalls.find((c) => c.id === message.toolCallId);
    if (call) return call.name;
  }
  return null;
}

/** Share of the episode's response tokens the policy generated (the trained share); null without tokens. */
export function policyShare(episode: Episode): number | null {
  const total = episode.trainedTokens + episode.contextTokens;
  return total > 0 ? episode.trainedTokens / total : null;
}
