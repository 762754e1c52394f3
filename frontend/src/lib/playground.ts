/**
 * The playground's requests and answers: OpenAI chat completions on the platform's `/openai/v1`
 * (backend/api/routes/openai_inference.py), signed in with the dashboard's session token (the route takes a session
 * token or an API key as its bearer). Pure helpers: building the body, reading the answer and its per-token logprobs,
 * and the model ids a URL preselects.
 */

export interface Sampling {
  temperature: number; // 0..2
  top_p: number; // (0, 1]
  max_tokens: number; // >= 1
  seed: number | null; // null: unseeded
  top_logprobs: number; // 0..20 alternatives shown per token
}
export const DEFAULT_SAMPLING: Sampling = { temperature: 0.7, top_p: 1, max_tokens: 128, seed: null, top_logprobs: 3 };

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface TokenLogprob {
  token: string;
  logprob: number;
  top: { token: string; logprob: number }[];
}

export interface Reply {
  text: string;
  finishReason: string;
  promptTokens: number;
  completionTokens: number;
  tokens: TokenLogprob[];
}

/** The chat-completions body: the conversation (system prompt first when given) and the sampling controls. */
export function chatBody(model: string, system: string, messages: readonly ChatMessage[], sampling: Sampling): Record<string, unknown> {
  const all: ChatMessage[] = system.trim() ? [{ role: "system", content: system }, ...messages] : [...messages];
  const body: Record<string, unknown> = {
    model,
    messages: all,
    temperature: sampling.temperature,
    top_p: sampling.top_p,
    max_tokens: sampling.max_tokens,
    logprobs: true,
    top_logprobs: sampling.top_logprobs,
  };
  if (sampling.seed !== null) body.seed = sampling.seed;
  return body;
}

/** The first choice of an answer, with its token counts and per-token logprobs. */
export function readReply(answer: unknown): Reply {
  const a = answer as {
    choices?: { message?: { content?: string | null }; finish_reason?: string; logprobs?: { content?: { token: string; logprob: number; top_logprobs?: { token: string; logprob: number }[] }[] | null } | null }[];
    usage?: { prompt_tokens?: number; completion_tokens?: number };
  };
  const choice = a.choices?.[0];
  if (!choice) throw new Error("the answer has no choices");
  return {
    text: choice.message?.content ?? "",
    finishReason: choice.finish_reason ?? "",
    promptTokens: a.usage?.prompt_tokens ?? 0,
    completionTokens: a.usage?.completion_tokens ?? 0,
    tokens: (choice.logprobs?.content ?? []).map((t) => ({
      token: t.token,
      logprob: t.logprob,
      top: (t.top_logprobs ?? []).map((alt) => ({ token: alt.token, logprob: alt.logprob })),
    })),
  };
}

/** An error answer's message (OpenAI's envelope `{error: {message, param}}`, or FastAPI's `{detail}`). */
export function errorText(status: number, body: unknown): string {
  const b = body as { error?: { message?: string; param?: string | null }; detail?: unknown } | null;
  if (b?.error?.message) return `${status}: ${b.error.message}${b.error.param ? ` (${b.error.param})` : ""}`;
  if (typeof b?.detail === "string") return `${status}: ${b.detail}`;
  return `${status}: the request failed`;
}

/** Probability of a token as a 0-100 percentage (for shading and tooltips). */
export function percent(logprob: number): number {
  return Math.round(Math.exp(logprob) * 1000) / 10;
}

/** Mean logprob of the reply's tokens (null without any): a one-number confidence to compare two models by. */
export function meanLogprob(tokens: readonly TokenLogprob[]): number | null {
  return tokens.length ? tokens.reduce((sum, t) => sum + t.logprob, 0) / tokens.length : null;
}

/** The playground route that opens with `model` (and, side by side, `other`) chosen. */
export function playgroundRoute(model: string, other?: string): string {
  const params = new URLSearchParams({ model });
  if (other) params.set("compare", other);
  return `/playground?${params.toString()}`;
}

/** Sampling controls from form text: numbers clamped to what the API accepts; an empty seed is no seed. */
export function clampSampling(s: Sampling): Sampling {
  const clamp = (v: number, lo: number, hi: number, fallback: number) => (Number.isFinite(v) ? Math.min(hi, Math.max(lo, v)) : fallback);
  return {
    temperature: clamp(s.temperature, 0, 2, DEFAULT_SAMPLING.temperature),
    top_p: clamp(s.top_p, 0.01, 1, 1),
    max_tokens: Math.round(clamp(s.max_tokens, 1, 16384, DEFAULT_SAMPLING.max_tokens)),
    seed: s.seed === null || !Number.isFinite(s.seed) ? null : Math.round(clamp(s.seed, 0, Number.MAX_SAFE_INTEGER, 0)),
    top_logprobs: Math.round(clamp(s.top_logprobs, 0, 20, 0)),
  };
}
