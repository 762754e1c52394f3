/**
 * The typed API client: openapi-fetch over the generated `schema.d.ts` (never hand-edited; `npm run gen:api`).
 * Adds the bearer token, turns error answers into `ApiError` (with 422 field messages) and signs out on 401.
 */
import createClient, { type Middleware } from "openapi-fetch";
import { errorMessage, fieldErrors } from "../lib/fieldErrors";
import type { paths } from "./schema";

const TOKEN_KEY = "streamrl.token";

let token: string | null = localStorage.getItem(TOKEN_KEY);
const unauthorizedListeners = new Set<() => void>();

export function getToken(): string | null {
  return token;
}

export function setToken(value: string | null): void {
  token = value;
  if (value) localStorage.setItem(TOKEN_KEY, value);
  else localStorage.removeItem(TOKEN_KEY);
}

/** Called when the API answers 401 to a signed-in request (expired session, revoked key). */
export function onUnauthorized(listener: () => void): () => void {
  unauthorizedListeners.add(listener);
  return () => unauthorizedListeners.delete(listener);
}

const auth: Middleware = {
  onRequest({ request }) {
    if (token) request.headers.set("Authorization", `Bearer ${token}`);
    return request;
  },
  onResponse({ response }) {
    if (response.status === 401 && token) unauthorizedListeners.forEach((listener) => listener());
    return response;
  },
};

export const api = createClient<paths>({ baseUrl: "" });
api.use(auth);

/** An error answer: `message` is human-readable, `fields` maps dotted field paths to 422 messages. */
export class ApiError extends Error {
  readonly status: number;
  readonly body: unknown;
  readonly fields: Record<string, string>;

  constructor(status: number, body: unknown) {
    super(errorMessage(body, status));
    this.status = status;
    this.body = body;
    this.fields = fieldErrors((body as { detail?: unknown } | null)?.detail);
  }
}

/** The data of a successful openapi-fetch call, or throw `ApiError`. */
export async function unwrap<T>(call: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw new ApiError(response.status, error ?? null);
  return data as T;
}

/** Headers of a hand-made request (the SSE stream is read with fetch, see lib/sse.ts). */
export function authHeaders(): Record<string, string> {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** URL of a job's live event stream (read over fetch with `authHeaders()`, so no token in the URL). */
export function jobStreamUrl(jobId: number): string {
  return `/api/v1/jobs/${jobId}/stream`;
}
