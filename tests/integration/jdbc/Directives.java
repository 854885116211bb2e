// pgjdbc sending natural-language directives through the pgnl proxy; run by
// tests/integration/test_directives.py with the JDK's source launcher:
//
//   java -cp /usr/share/java/postgresql.jar tests/integration/jdbc/Directives.java URL USER PASSWORD
//
// The database is the test's small university (students, courses, enrollments). pgjdbc sends
// every statement in the extended protocol: Parse/Bind/Describe/Execute/Sync, with a BEGIN in
// the same batch when autocommit is off, and a named server-side statement once a
// PreparedStatement has run prepareThreshold times. Prints one "key=value" line a fact.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.SQLWarning;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.postgresql.PGStatement;

public class Directives {
    static final String COUNT = "-- nl: how many students are there?";

    static void print(String key, Object value) {
        System.out.println(key + "=" + value);
    }

    static long scalar(Connection conn, String sql) throws SQLException {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            rs.next();
            return rs.getLong(1);
        }
    }

    static String warnings(Statement st) throws SQLException {
        List<String> found = new ArrayList<>();
        for (SQLWarning w = st.getWarnings(); w != null; w = w.getNextWarning()) {
            found.add(w.getMessage());
        }
        return String.join(" | ", found);
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            // A Statement, autocommit on.
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(COUNT)) {
                rs.next();
                print("statement_count", rs.getLong(1));
                print("statement_notice", warnings(st));
            }

            // A PreparedStatement run past prepareThreshold: a named server-side statement.
            try (PreparedStatement ps = conn.prepareStatement(COUNT)) {
                List<Long> counts = new ArrayList<>();
                for (int i = 0; i < 4; i++) {
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        counts.add(rs.getLong(1));
                    }
                }
                print("prepared_counts", counts);
                print("prepared_server_side", ((PGStatement) ps).isUseServerPrepare());
            }

            // nl show: and nl explain: with their column types.
            try (Statement st = conn.createStatement();
                    ResultSet rs = st.executeQuery("-- nl show: how many courses are there?")) {
                rs.next();
                print("show_column", rs.getMetaData().getColumnName(1));
                print("show_sql", rs.getString(1));
            }
            try (Statement st = conn.createStatement();
                    ResultSet rs = st.executeQuery("-- nl explain: how many courses are there?")) {
                ResultSetMetaData meta = rs.getMetaData();
                List<String> columns = new ArrayList<>();
                for (int i = 1; i <= meta.getColumnCount(); i++) {
                    columns.add(meta.getColumnName(i) + ":" + meta.getColumnTypeName(i));
                }
                print("explain_columns", columns);
                int rows = 0;
                while (rs.next()) {
                    rows++;
                }
                print("explain_has_rows", rows > 0);
            }

            // Autocommit off: the directive is the transaction's first statement (pgjdbc sends
            // BEGIN in the same batch), then a write, a directive that sees it, a rollback.
            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                try (ResultSet rs = st.executeQuery("-- nl: how many courses are there?")) {
                    rs.next();
                    print("tx_first_count", rs.getLong(1));
                }
                st.executeUpdate("INSERT INTO courses VALUES (100, 'Jdbc', 1)");
                try (PreparedStatement ps = conn.prepareStatement(
                        "-- nl: how many courses are there?")) {
                    for (int i = 0; i < 3; i++) {
                        try (ResultSet rs = ps.executeQuery()) {
                            rs.next();
                            print("tx_count_" + i, rs.getLong(1));
                        }
                    }
                }
                print("tx_still_writable", st.executeUpdate(
                        "INSERT INTO courses VALUES (101, 'Jdbc2', 1)"));
                conn.rollback();
            }
            conn.setAutoCommit(true);
            print("after_rollback", scalar(conn, "SELECT count(*) FROM courses"));

            // A directive that cannot run: an error with its SQLSTATE; the connection goes on.
            try (Statement st = conn.createStatement()) {
                st.executeQuery("-- nl: how many students?\nSELECT 1");
                print("error", "none");
            } catch (SQLException e) {
                print("error", e.getSQLState());
            }
            print("after_error", scalar(conn, "SELECT 41 + 1"));
        }
        print("done", true);
    }
}
