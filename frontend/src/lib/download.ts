/** Authenticated downloads: the token travels in the Authorization header (never in a URL), so fetch then save. */
import { ApiError, authHeaders } from "../api/client";

export function filenameOf(disposition: string | null, fallback: string): string {
  const match = /filename="?([^";]+)"?/.exec(disposition ?? "");
  return match ? match[1] : fallback;
}

export async function download(url: string, fallbackName: string): Promise<void> {
  const answer = await fetch(url, { headers: authHeaders() });
  if (!answer.ok) {
    const body = await answer.json().catch(() => null);
    throw new ApiError(answer.status, body);
  }
  const blob = await answer.blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = filenameOf(answer.headers.get("content-disposition"), fallbackName);
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
}
