// pgjdbc through the pgnl proxy; run by tests/integration/test_jdbc.py with the JDK's
// source launcher:
//
//   java -cp /usr/share/java/postgresql.jar tests/integration/jdbc/Main.java URL USER PASSWORD TABLE
//
// Prints one "key=value" line a fact; the Python test asserts on them. Any unexpected exception
// ends the program with a non-zero exit status and its stack trace on stderr.

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.sql.Timestamp;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.postgresql.PGConnection;
import org.postgresql.PGStatement;

public class Main {
    static void print(String key, Object value) {
        System.out.println(key + "=" + value);
    }

    static void check(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    static long scalar(Connection conn, String sql) throws SQLException {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            check(rs.next(), "a row from " + sql);
            return rs.getLong(1);
        }
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String table = args[3];
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);

        try (Connection conn = DriverManager.getConnection(url, props)) {
            DatabaseMetaData meta = conn.getMetaData();
            print("server_version", meta.getDatabaseMajorVersion());
            print("driver_version", meta.getDriverVersion());
            print("backend_pid_matches",
                    ((PGConnection) conn).getBackendPID() == scalar(conn, "SELECT pg_backend_pid()"));

            // A PreparedStatement run past prepareThreshold: pgjdbc switches to a named
            // server-side statement (Parse once, then Bind/Execute), binary results included.
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT ?::int * 2, ?::text || '!', ?::numeric + 1, ?::timestamp")) {
                long sum = 0;
                Timestamp ts = Timestamp.valueOf("2026-11-30 12:34:56.789");
                for (int i = 0; i < 10; i++) {
                    ps.setInt(1, i);
                    ps.setString(2, "v" + i + " é");
                    ps.setBigDecimal(3, new BigDecimal("1.25"));
                    ps.setTimestamp(4, ts);
                    try (ResultSet rs = ps.executeQuery()) {
                        check(rs.next(), "a row");
                        sum += rs.getInt(1);
                        check(rs.getString(2).equals("v" + i + " é!"), "text " + rs.getString(2));
                        check(rs.getBigDecimal(3).compareTo(new BigDecimal("2.25")) == 0, "numeric");
                        check(rs.getTimestamp(4).equals(ts), "timestamp " + rs.getTimestamp(4));
                        check(!rs.next(), "one row");
                    }
                }
                print("prepared_sum", sum);
                print("server_prepare", ((PGStatement) ps).isUseServerPrepare());
                print("pg_prepared_statements", scalar(conn,
                        "SELECT count(*) FROM pg_prepared_statements"
                                + " WHERE statement LIKE 'SELECT $1::int * 2%'"));
            }

            try (Statement st = conn.createStatement()) {
                st.execute("CREATE TABLE " + table + " (id int PRIMARY KEY, name text NOT NULL,"
                        + " price numeric(10,2), created timestamptz DEFAULT now())");
            }

            // A batch insert: many Bind/Execute pairs, one Sync.
            try (PreparedStatement ps = conn.prepareStatement(
                    "INSERT INTO " + table + " (id, name, price) VALUES (?, ?, ?)")) {
                for (int i = 1; i <= 1000; i++) {
                    ps.setInt(1, i);
                    ps.setString(2, "name\t" + i + " ✓");
                    ps.setBigDecimal(3, new BigDecimal(i).movePointLeft(2));
                    ps.addBatch();
                }
                int[] counts = ps.executeBatch();
                int total = 0;
                for (int c : counts) {
                    total += c;
                }
                print("batch_statements", counts.length);
                print("batch_inserted", total);
            }
            print("rows_after_batch", scalar(conn, "SELECT count(*) FROM " + table));
            print("price_sum", scalar(conn, "SELECT sum(price * 100) FROM " + table));

            // Transactions: commit, rollback, and a savepoint rolled back.
            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                st.executeUpdate("INSERT INTO " + table + " (id, name) VALUES (2001, 'committed')");
                conn.commit();
                st.executeUpdate("INSERT INTO " + table + " (id, name) VALUES (2002, 'rolled back')");
                conn.rollback();
                st.executeUpdate("INSERT INTO " + table + " (id, name) VALUES (2003, 'kept')");
                Savepoint sp = conn.setSavepoint();
                st.executeUpdate("INSERT INTO " + table + " (id, name) VALUES (2004, 'undone')");
                conn.rollback(sp);
                conn.commit();
            }
            List<Long> ids = new ArrayList<>();
            try (Statement st = conn.createStatement();
                    ResultSet rs = st.executeQuery(
                            "SELECT id FROM " + table + " WHERE id > 2000 ORDER BY id")) {
                while (rs.next()) {
                    ids.add(rs.getLong(1));
                }
            }
            conn.commit();
            print("ids_after_transactions", ids);

            // A fetch size in a transaction: a portal read in pieces (Execute with a row limit,
            // PortalSuspended), with another statement in between.
            try (Statement st = conn.createStatement()) {
                st.setFetchSize(100);
                long rows = 0;
                long sum = 0;
                try (ResultSet rs = st.executeQuery(
                        "SELECT g FROM generate_series(1, 10000) g ORDER BY g")) {
                    while (rs.next()) {
                        rows++;
                        sum += rs.getLong(1);
                        if (rows == 5000) {
                            check(scalar(conn, "SELECT 7") == 7, "query in between");
                        }
                    }
                }
                print("fetched_rows", rows);
                print("fetched_sum", sum);
            }
            conn.commit();

            // An error inside a transaction, then recovery.
            try (Statement st = conn.createStatement()) {
                try {
                    st.executeQuery("SELECT 1/0");
                    print("error", "none");
                } catch (SQLException e) {
                    print("error", e.getSQLState());
                }
                conn.rollback();
                print("after_error", scalar(conn, "SELECT 41 + 1"));
            }
            conn.setAutoCommit(true);

            // A query timeout: pgjdbc cancels through a CancelRequest on a new connection.
            try (Statement st = conn.createStatement()) {
                st.setQueryTimeout(1);
                long start = System.nanoTime();
                try {
                    st.execute("SELECT pg_sleep(30)");
                    print("timeout", "none");
                } catch (SQLException e) {
                    print("timeout", e.getSQLState());
                }
                print("timeout_seconds", (System.nanoTime() - start) / 1_000_000_000L);
                print("after_timeout", scalar(conn, "SELECT 1"));
            }

            // Metadata: catalog queries pgjdbc writes itself.
            try (ResultSet rs = meta.getTables(null, "public", table, new String[] {"TABLE"})) {
                List<String> found = new ArrayList<>();
                while (rs.next()) {
                    found.add(rs.getString("TABLE_SCHEM") + "." + rs.getString("TABLE_NAME")
                            + ":" + rs.getString("TABLE_TYPE"));
                }
                print("tables", found);
            }
            try (ResultSet rs = meta.getColumns(null, "public", table, null)) {
                List<String> columns = new ArrayList<>();
                while (rs.next()) {
                    columns.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("TYPE_NAME")
                            + ":" + rs.getString("IS_NULLABLE"));
                }
                print("columns", columns);
            }
            try (ResultSet rs = meta.getPrimaryKeys(null, "public", table)) {
                List<String> keys = new ArrayList<>();
                while (rs.next()) {
                    keys.add(rs.getString("COLUMN_NAME"));
                }
                print("primary_key", keys);
            }
        }
        print("done", true);
    }
}
