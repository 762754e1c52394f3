/** Who is signed in and in which team; the token lives in localStorage (see api/client.ts). */
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from "react";
import { api, getToken, onUnauthorized, setToken, unwrap } from "./api/client";
import type { Me } from "./api/types";
import { queryClient } from "./lib/queries";

interface SessionValue {
  me: Me | null;
  loading: boolean;
  signIn: (email: string, password: string) => Promise<void>;
  register: (email: string, password: string, teamName: string) => Promise<void>;
  switchTeam: (teamId: number) => Promise<void>;
  refresh: () => Promise<void>; // reload who-am-I (e.g. the teams list after accepting an invitation)
  signOut: () => void;
  canWrite: boolean; // member or above
  isAdmin: boolean; // admin or owner
}

const SessionContext = createContext<SessionValue | null>(null);

export function SessionProvider({ children }: { children: ReactNode }) {
  const [me, setMe] = useState<Me | null>(null);
  const [loading, setLoading] = useState(Boolean(getToken()));

  const loadMe = useCallback(async () => {
    setMe(await unwrap(api.GET("/api/v1/auth/me")));
  }, []);

  const signOut = useCallback(() => {
    setToken(null);
    setMe(null);
    queryClient.clear(); // cached answers belong to the signed-out session
  }, []);

  useEffect(() => onUnauthorized(signOut), [signOut]);

  useEffect(() => {
    if (!getToken()) return;
    // a 401 signs out (onUnauthorized above); any other failure (the request cut off by a reload, the server
    // restarting) keeps the token, so the next load signs in again instead of losing the session
    loadMe()
      .catch(() => setMe(null))
      .finally(() => setLoading(false));
  }, [loadMe, signOut]);

  const signIn = useCallback(
    async (email: string, password: string) => {
      const answer = await unwrap(api.POST("/api/v1/auth/login", { body: { email, password } }));
      setToken(answer.token);
      await loadMe();
    },
    [loadMe],
  );

  const register = useCallback(
    async (email: string, password: string, teamName: string) => {
      await unwrap(api.POST("/api/v1/auth/register", { body: { email, password, team_name: teamName } }));
      await signIn(email, password);
    },
    [signIn],
  );

  const switchTeam = useCallback(
    async (teamId: number) => {
      const answer = await unwrap(api.POST("/api/v1/auth/switch-team", { body: { team_id: teamId } }));
      setToken(answer.token);
      queryClient.clear(); // every cached answer is scoped to the previous team
      await loadMe();
    },
    [loadMe],
  );

  const value = useMemo<SessionValue>(() => {
    const role = me?.role ?? "viewer";
    return {
      me,
      loading,
      signIn,
      register,
      switchTeam,
      refresh: loadMe,
      signOut,
      canWrite: role !== "viewer",
      isAdmin: role === "admin" || role === "owner",
    };
  }, [me, loading, signIn, register, switchTeam, loadMe, signOut]);

  return <SessionContext.Provider value={value}>{children}</SessionContext.Provider>;
}

export function useSession(): SessionValue {
  const value = useContext(SessionContext);
  if (!value) throw new Error("useSession outside <SessionProvider>");
  return value;
}
