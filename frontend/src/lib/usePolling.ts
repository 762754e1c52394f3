/** Load data now and again every `intervalMs` (paused while the tab is hidden); `reload` forces a refresh. */
import { useCallback, useEffect, useRef, useState } from "react";

export function usePolling<T>(load: () => Promise<T>, deps: unknown[], intervalMs = 5000) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const loadRef = useRef(load);
  loadRef.current = load;

  const reload = useCallback(async () => {
    try {
      setData(await loadRef.current());
      setError(null);
    } catch (err) {
      setError(err);
    }
  }, []);

  useEffect(() => {
    void reload();
    if (intervalMs <= 0) return;
    const timer = setInterval(() => {
      if (!document.hidden) void reload();
    }, intervalMs);
    return () => clearInterval(timer);
  }, [reload, intervalMs, ...deps]); // caller-provided deps: a filter change reloads at once

  return { data, error, reload };
}
